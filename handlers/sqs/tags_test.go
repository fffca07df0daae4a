package sqs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// TestQueueTags: CreateQueue's tags, TagQueue, UntagQueue and
// ListQueueTags over both protocols are the REST queue's tags; more than
// 50 tags, or a key or value too long, is refused and writes nothing; a
// key without manage is refused.
func TestQueueTags(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()

	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-tagged"), Tags: map[string]string{"team": "billing"}})
	require.NoError(t, err)
	q := out.QueueUrl
	_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q, Tags: map[string]string{"team": "payments", "env": "prod"}})
	require.NoError(t, err)
	tags, err := c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: q})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "payments", "env": "prod"}, tags.Tags)
	r := env.Do(http.MethodGet, "/v1/queues/orders-tagged", nil)
	require.Equal(t, map[string]any{"team": "payments", "env": "prod"}, r.Map(t)["tags"])

	_, err = c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: q, TagKeys: []string{"team", "absent"}})
	require.NoError(t, err)
	more := map[string]string{}
	for i := range 50 {
		more[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, bad := range []map[string]string{more, {strings.Repeat("k", 129): "v"}, {"k": strings.Repeat("v", 257)}} {
		_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q, Tags: bad})
		requireCode(t, err, "InvalidParameterValue")
	}
	_, err = c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: q, TagKeys: []string{"nul\x00key"}})
	requireCode(t, err, "InvalidParameterValue")
	_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q, Tags: map[string]string{"k": "nul\x00value"}})
	requireCode(t, err, "InvalidParameterValue")
	_, err = client(env, scopedID, scopedSecret).TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q, Tags: map[string]string{"a": "b"}})
	requireCode(t, err, "AccessDenied")

	// The Query protocol: Tag.N.Key/Value in, <Tag><Key/><Value/></Tag> out.
	status, body := queryRequest{params: url.Values{"Action": {"TagQueue"}, "QueueUrl": {*q},
		"Tag.1.Key": {"owner"}, "Tag.1.Value": {"ops & co"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body = queryRequest{params: url.Values{"Action": {"ListQueueTags"}, "QueueUrl": {*q}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.True(t, contains(string(body), "<Tag><Key>env</Key><Value>prod</Value></Tag>",
		"<Tag><Key>owner</Key><Value>ops &amp; co</Value></Tag>"), "%s", body)
	status, body = queryRequest{params: url.Values{"Action": {"UntagQueue"}, "QueueUrl": {*q}, "TagKey.1": {"owner"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	tags, err = c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: q})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"env": "prod"}, tags.Tags, "refused changes wrote nothing")

	_, err = c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: aws.String(queueURL(env, "orders-none"))})
	requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: aws.String(queueURL(env, "orders-none")), Tags: map[string]string{"a": "b"}})
	requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
}
