package sqs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"

	sqsface "github.com/ferry-mq/ferry/handlers/sqs"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// debianPython is the interpreter Debian's python3-boto3 installs boto3
// for; .ci/run installs the package when it lacks boto3.
const debianPython = "/usr/bin/python3"

// TestBoto3QueryProtocol runs a second real client, Debian's boto3 (1.26,
// which speaks the Query protocol), through FIFO sends with every
// attribute type, a batch with a refused entry, receive,
// ChangeMessageVisibility 0, a batch delete, tags, attributes, a typed
// error and DeleteQueue (testdata/boto3_query.py), and checks what it saw.
func TestBoto3QueryProtocol(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command(debianPython, "-c", "import boto3").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import boto3 (%v: %s): apt-get install python3-boto3, as .ci/run does", debianPython, err, out)
	}
	env := start(t)
	cmd := exec.Command(debianPython, "testdata/boto3_query.py")
	cmd.Env = append(os.Environ(), "FERRY_URL="+env.URL, "AWS_ACCESS_KEY_ID=admin", "AWS_SECRET_ACCESS_KEY="+ferrytest.AdminKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_SESSION_TOKEN=", "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1")
	raw, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("boto3 script failed: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	var out struct {
		Boto3, URL, Body, Group, Missing string
		MD5BodyOK                        bool     `json:"md5_body_ok"`
		BatchOK                          []string `json:"batch_ok"`
		BatchFailed                      [][]any  `json:"batch_failed"`
		Attrs                            map[string]string
		Again, Deleted                   []string
		Tags                             map[string]string
		QueueAttrs                       map[string]string `json:"queue_attrs"`
		ListedAfterDelete                []string          `json:"listed_after_delete"`
	}
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	t.Logf("boto3 %s", out.Boto3)
	require.Equal(t, queueURL(env, "boto.fifo"), out.URL)
	require.True(t, out.MD5BodyOK)
	require.Equal(t, []string{"a"}, out.BatchOK)
	require.Equal(t, [][]any{{"bad", "InvalidParameterValue", true}}, out.BatchFailed)
	require.Equal(t, "invoice 7 ✓", out.Body)
	require.Equal(t, map[string]string{"s": "plain ✓", "n": "-1.5", "b": "0001ff"}, out.Attrs)
	require.Equal(t, "g", out.Group)
	require.Equal(t, []string{"invoice 7 ✓"}, out.Again, "visible again at once; the group's next waits behind it")
	require.Equal(t, []string{"1"}, out.Deleted)
	require.Equal(t, map[string]string{"team": "billing", "env": "test"}, out.Tags)
	require.Equal(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "ReceiveMessageWaitTimeSeconds": "1"}, out.QueueAttrs)
	require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", out.Missing)
	require.Empty(t, out.ListedAfterDelete)
}

// presign is a presigned Query request (X-Amz-Signature in the query
// string, signed by aws-sdk-go-v2's signer) of the method to path with the
// parameters, signed as id/secret at the time at.
func presign(t *testing.T, env *ferrytest.Env, method, path string, params url.Values, id, secret string, at time.Time) string {
	t.Helper()
	req, err := http.NewRequest(method, env.URL+path+"?"+params.Encode(), nil)
	require.NoError(t, err)
	creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret}
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, emptySHA256, "sqs", "us-east-1", at)
	require.NoError(t, err)
	return signed
}

// emptySHA256 is the SHA-256 of an empty payload, hex.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// TestPresignedQuery: a Query request whose parameters and presigned
// signature are in the query string is served, by GET and by POST, at /
// and at a QueueUrl; a presigned URL with an altered parameter, another
// secret or an old date is refused with SQS's codes and does nothing.
func TestPresignedQuery(t *testing.T) {
	t.Parallel()
	env := start(t)
	do := func(method, u string) (int, string) {
		req, err := http.NewRequest(method, u, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	now := time.Now()
	status, body := do(http.MethodGet, presign(t, env, http.MethodGet, "/", url.Values{"Action": {"CreateQueue"}, "QueueName": {"orders-pre"}}, "admin", ferrytest.AdminKey, now))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<QueueUrl>"+queueURL(env, "orders-pre")+"</QueueUrl>")
	send := url.Values{"Action": {"SendMessage"}, "MessageBody": {"by GET"}}
	status, body = do(http.MethodGet, presign(t, env, http.MethodGet, "/"+sqsface.AccountID+"/orders-pre", send, "admin", ferrytest.AdminKey, now))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "<MD5OfMessageBody>")
	status, body = do(http.MethodPost, presign(t, env, http.MethodPost, "/", url.Values{"Action": {"GetQueueUrl"}, "QueueName": {"orders-pre"}}, "admin", ferrytest.AdminKey, now))
	require.Equal(t, http.StatusOK, status, body)

	signed := presign(t, env, http.MethodGet, "/"+sqsface.AccountID+"/orders-pre", send, "admin", ferrytest.AdminKey, now)
	altered := strings.Replace(signed, "MessageBody=by", "MessageBody=my", 1)
	require.NotEqual(t, signed, altered)
	status, body = do(http.MethodGet, altered)
	requireQueryError(t, status, []byte(body), http.StatusForbidden, "SignatureDoesNotMatch")
	status, body = do(http.MethodGet, presign(t, env, http.MethodGet, "/"+sqsface.AccountID+"/orders-pre", send, "admin", "wrong-secret", now))
	requireQueryError(t, status, []byte(body), http.StatusForbidden, "SignatureDoesNotMatch")
	status, body = do(http.MethodGet, presign(t, env, http.MethodGet, "/"+sqsface.AccountID+"/orders-pre", send, "admin", ferrytest.AdminKey, now.Add(-time.Hour)))
	require.Equal(t, http.StatusForbidden, status, body)
	require.EqualValues(t, 1, restHeld(t, env, "orders-pre"), "only the signed send was written")
}
