package sqsmd5

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// fakeSQS answers SendMessage, SendMessageBatch and ReceiveMessage in AWS
// JSON 1.0 with the checksums of this package (or, when corrupt, of a body
// one byte longer) so that the SDK's own validation judges them.
type fakeSQS struct {
	corrupt bool
	stored  string
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct {
		MessageBody string
		Entries     []struct{ Id, MessageBody string }
	}
	_ = json.Unmarshal(body, &in)
	md5Of := func(s string) string {
		if f.corrupt {
			s += " "
		}
		return Body(s)
	}
	var out any
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.SendMessage":
		f.stored = in.MessageBody
		out = map[string]any{"MessageId": "m-1", "MD5OfMessageBody": md5Of(in.MessageBody)}
	case "AmazonSQS.SendMessageBatch":
		var ok []map[string]any
		for _, e := range in.Entries {
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m-" + e.Id, "MD5OfMessageBody": md5Of(e.MessageBody)})
		}
		out = map[string]any{"Successful": ok, "Failed": []any{}}
	case "AmazonSQS.ReceiveMessage":
		out = map[string]any{"Messages": []map[string]any{{
			"MessageId": "m-1", "ReceiptHandle": "r-1", "Body": f.stored, "MD5OfBody": md5Of(f.stored),
		}}}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

// TestBodyValidatedBySDK: aws-sdk-go-v2's SQS client recomputes
// MD5OfMessageBody on SendMessage, SendMessageBatch and ReceiveMessage and
// accepts Body's; a wrong checksum makes the same calls fail, so the check
// is really made.
func TestBodyValidatedBySDK(t *testing.T) {
	t.Parallel()
	bodies := []string{"plain", "ünïcödé \u2603 \U0001F600", `{"json": [1, 2.5, "x"]}`, "tab\tnew\nline\r\n", "<xml>&amp;</xml>"}
	for _, corrupt := range []bool{false, true} {
		f := &fakeSQS{corrupt: corrupt}
		srv := httptest.NewServer(f)
		defer srv.Close()
		c := sqs.New(sqs.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: srv.Client(), Retryer: aws.NopRetryer{},
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "key_1", SecretAccessKey: "secret"}, nil
			}),
		})
		ctx := context.Background()
		queue := aws.String(srv.URL + "/000000000000/q")
		for _, body := range bodies {
			_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: queue, MessageBody: aws.String(body)})
			checkValidated(t, corrupt, err)
			_, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: queue})
			checkValidated(t, corrupt, err)
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
		for i, body := range bodies {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), MessageBody: aws.String(body)}
		}
		_, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: queue, Entries: entries})
		checkValidated(t, corrupt, err)
	}
}

func checkValidated(t *testing.T, corrupt bool, err error) {
	t.Helper()
	if !corrupt {
		require.NoError(t, err)
		return
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "checksum")
}
