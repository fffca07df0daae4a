package sqs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// auditEntry is the part of a GET /v1/audit entry these tests read.
type auditEntry struct {
	KeyName   string `json:"key_name"`
	Action    string `json:"action"`
	Resource  string `json:"resource"`
	RequestID string `json:"request_id"`
	Status    int    `json:"status"`
}

// TestAuditedActions: the changes made over SQS are in the audit log with
// REST's actions and resource names — CreateQueue and SetQueueAttributes
// queue.put, PurgeQueue messages.purge, StartMessageMoveTask
// messages.move, CancelMessageMoveTask messages.move_cancel, DeleteQueue
// queue.delete — with the status answered (a refusal too: 403, 400), and
// the key's name; sends, reads, lists and a request whose signature fails
// are not recorded.
func TestAuditedActions(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	srcURL, dlqURL := dlqPair(t, c, "audited", "audited-dlq", 1) // 2 CreateQueue, 1 SendMessage
	_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: &srcURL,
		Attributes: map[string]string{"VisibilityTimeout": "60"}})
	require.NoError(t, err)
	_, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: &srcURL})
	require.NoError(t, err)
	_, err = c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: &srcURL})
	require.NoError(t, err)
	task, err := c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: arn("audited-dlq")})
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", *awaitTask(t, c, "audited-dlq").Status)
	_, err = c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle})
	requireCode(t, err, "AWS.SimpleQueueService.UnsupportedOperation")
	_, err = client(env, scopedID, scopedSecret).CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-new")})
	requireCode(t, err, "AccessDenied")
	_, err = client(env, "admin", "not-the-secret").DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: &dlqURL})
	requireCode(t, err, "SignatureDoesNotMatch")
	_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: &dlqURL})
	require.NoError(t, err)

	r := env.Do(http.MethodGet, "/v1/audit", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var page struct{ Entries []auditEntry }
	r.JSON(t, &page)
	type row struct {
		action, resource string
		status           int
	}
	got := []row{}
	for _, e := range page.Entries {
		got = append(got, row{e.Action, e.Resource, e.Status})
		require.NotEmpty(t, e.RequestID)
	}
	require.Equal(t, []row{
		{"queue.delete", "queue:audited-dlq", 200},
		{"queue.put", "queue:orders-new", 403},
		{"messages.move_cancel", "queue:audited-dlq", 400},
		{"messages.move", "queue:audited-dlq", 200},
		{"messages.purge", "queue:audited", 200},
		{"queue.put", "queue:audited", 200},
		{"queue.put", "queue:audited", 200},
		{"queue.put", "queue:audited-dlq", 200},
	}, got)
	require.Equal(t, "FERRY_ADMIN_KEY", page.Entries[0].KeyName)
}
