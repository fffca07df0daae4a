package sqs_test

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// publishedMD5 is the checksum of one String attribute written out from
// the algorithm AWS publishes for message attributes ("Calculating the MD5
// message digest for message attributes", SQS Developer Guide), which SQS
// applies to system attributes alike: the name, then the data type, each
// as a 4-byte big-endian length and its UTF-8 bytes, then the transport
// type (1 for String), then the value as a 4-byte length and its bytes;
// the MD5 of it in lowercase hex. It is deliberately not package sqsmd5's
// code, which the face uses.
func publishedMD5(name, value string) string {
	var b []byte
	for _, part := range []string{name, "String"} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	b = append(b, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = append(b, value...)
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// TestMD5OfMessageSystemAttributes: SendMessage and SendMessageBatch, over
// both protocols, answer MD5OfMessageSystemAttributes of an AWSTraceHeader
// as the published algorithm computes it (the Java and Kotlin SDKs check
// it), for a short header and one whose length needs more than one byte;
// a message without system attributes answers none.
func TestMD5OfMessageSystemAttributes(t *testing.T) {
	t.Parallel()
	env := start(t)
	c, ctx := admin(env), context.Background()
	queue := createQueue(t, c, "traced", nil)
	// AWS's own example header, and a long one (length 0x0000012c).
	traces := []string{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
		"Root=1-5759e988-bd862e3fe1be46a994272793;" + strings.Repeat("Lineage=a87bd80c:0;", 14) + "Sampled=1"}
	// The test's encoder gives the guide's own example's checksum.
	require.Equal(t, "cd28f3b68aeee4b2eac9c66f2f694b58", publishedMD5("SellerName", "Example Store"))
	sys := func(trace string) map[string]types.MessageSystemAttributeValue {
		return map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String(trace)}}
	}
	for _, trace := range traces {
		want := publishedMD5("AWSTraceHeader", trace)
		sent, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: queue, MessageBody: aws.String("x"), MessageSystemAttributes: sys(trace)})
		require.NoError(t, err)
		require.Equal(t, want, aws.ToString(sent.MD5OfMessageSystemAttributes), "SendMessage, JSON")

		batch, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: queue, Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("traced"), MessageBody: aws.String("x"), MessageSystemAttributes: sys(trace)},
			{Id: aws.String("plain"), MessageBody: aws.String("y")},
		}})
		require.NoError(t, err)
		require.Len(t, batch.Successful, 2, "%+v", batch.Failed)
		for _, e := range batch.Successful {
			if aws.ToString(e.Id) == "traced" {
				require.Equal(t, want, aws.ToString(e.MD5OfMessageSystemAttributes), "SendMessageBatch, JSON")
			} else {
				require.Nil(t, e.MD5OfMessageSystemAttributes, "no system attributes, no checksum")
			}
		}

		status, body := queryRequest{params: url.Values{"Action": {"SendMessage"}, "QueueUrl": {*queue}, "MessageBody": {"x"},
			"MessageSystemAttribute.1.Name": {"AWSTraceHeader"}, "MessageSystemAttribute.1.Value.DataType": {"String"},
			"MessageSystemAttribute.1.Value.StringValue": {trace}}}.do(t, env, nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		var q struct {
			MD5System string `xml:"SendMessageResult>MD5OfMessageSystemAttributes"`
		}
		require.NoError(t, xml.Unmarshal(body, &q), "%s", body)
		require.Equal(t, want, q.MD5System, "SendMessage, Query")
	}
	plain, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: queue, MessageBody: aws.String("x")})
	require.NoError(t, err)
	require.Nil(t, plain.MD5OfMessageSystemAttributes)
}
