package sqs_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// A key made over REST signs SQS requests with its id and secret (the
// server keeps the secret sealed under FERRY_SECRET_KEY), with the
// permissions it has on REST; revoked on one instance, the other refuses
// its signatures within a second. No test seam is set: this is the
// server's own key lookup.
func TestStoredKeySignsSQS(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	secretKey := func(c *server.Config) { c.SecretKey = base64.StdEncoding.EncodeToString(raw) }
	a := ferrytest.Start(t, secretKey)
	b := ferrytest.StartOn(t, a.DatabaseURL, secretKey)
	require.Equal(t, http.StatusCreated, a.Do("PUT", "/v1/queues/billing-eu", nil).Status)
	require.Equal(t, http.StatusCreated, a.Do("PUT", "/v1/queues/orders", nil).Status)
	r := a.Do("POST", "/v1/keys", map[string]any{"name": "billing-sqs", "permissions": []any{
		map[string]any{"resource": "queue:billing-*", "actions": []string{"send", "read"}}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var k struct{ ID, Key string }
	r.JSON(t, &k)

	ctx := context.Background()
	viaB := client(b, k.ID, k.Key)
	url, err := viaB.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("billing-eu")})
	require.NoError(t, err)
	_, err = viaB.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("invoice 7")})
	require.NoError(t, err)
	_, err = viaB.SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl: aws.String(b.URL + "/000000000000/orders"), MessageBody: aws.String("not mine")})
	requireCode(t, err, "AccessDenied")
	_, err = client(b, k.ID, k.Key+"x").SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("x")})
	requireCode(t, err, "SignatureDoesNotMatch")

	require.Equal(t, http.StatusNoContent, a.Do("DELETE", "/v1/keys/"+k.ID, nil).Status)
	ferrytest.WaitFor(t, time.Second, "the other instance to refuse the revoked key's signatures", func() bool {
		_, err := viaB.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("billing-eu")})
		return err != nil
	})
	_, err = viaB.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("after revoke")})
	requireCode(t, err, "InvalidClientTokenId")

	got := a.Do("GET", "/v1/queues/billing-eu", nil).Map(t)
	require.EqualValues(t, 1, got["stats"].(map[string]any)["available"], "only the message sent before the revoke")
}
