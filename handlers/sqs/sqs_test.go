package sqs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	sqsface "github.com/ferry-mq/ferry/handlers/sqs"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Scoped test keys the SQS face knows (server.Config.SQSKeys), in place of
// the stored keys (TestStoredKeySignsSQS tests those).
const (
	scopedID     = "key_scoped"
	scopedSecret = "scoped-secret-0123456789"
)

// scopedKeys knows scopedID: send and read on queues named orders-*.
func scopedKeys(_ context.Context, id string) (string, access.Key, error) {
	if id != scopedID {
		return "", access.Key{}, sigv4.ErrUnknownKey
	}
	grants, err := access.Parse([]access.Spec{{Resource: "queue:orders-*", Actions: []string{"send", "read"}}})
	if err != nil {
		return "", access.Key{}, err
	}
	return scopedSecret, access.Key{ID: scopedID, Grants: grants}, nil
}

// start boots a Ferry whose SQS face also knows the scoped key.
func start(t *testing.T) *ferrytest.Env {
	t.Helper()
	return ferrytest.Start(t, func(c *server.Config) { c.SQSKeys = scopedKeys })
}

// client is aws-sdk-go-v2's SQS client for env, signing as id/secret; it
// does not retry, so that each call is one request.
func client(env *ferrytest.Env, id, secret string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(env.URL), Retryer: aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret}, nil
		}),
	})
}

// admin is the SQS client of the admin key.
func admin(env *ferrytest.Env) *awssqs.Client { return client(env, "admin", ferrytest.AdminKey) }

// requireCode requires err to be an API error with the code.
func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "want %s, got %v", code, err)
	require.Equal(t, code, ae.ErrorCode(), "%v", err)
}

// queryRequest is a Query protocol request, signed with aws-sdk-go-v2's
// signer as id/secret at the time `at`.
type queryRequest struct {
	path   string
	params url.Values
	id     string
	secret string
	at     time.Time
}

// do sends the request (its body altered by alter, after signing, when
// set) and returns the status and the body.
func (q queryRequest) do(t *testing.T, env *ferrytest.Env, alter func([]byte) []byte) (int, []byte) {
	t.Helper()
	body := []byte(q.params.Encode())
	path := q.path
	if path == "" {
		path = "/"
	}
	req, err := http.NewRequest(http.MethodPost, env.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	id, secret, at := q.id, q.secret, q.at
	if id == "" {
		id, secret = "admin", ferrytest.AdminKey
	}
	if at.IsZero() {
		at = time.Now()
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret}
	require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sqs", "us-east-1", at))
	if alter != nil {
		body = alter(body)
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// queryError is the Query protocol's error answer.
type queryError struct {
	XMLName xml.Name `xml:"http://queue.amazonaws.com/doc/2012-11-05/ ErrorResponse"`
	Error   struct {
		Type, Code, Message string
	}
	RequestID string `xml:"RequestId"`
}

// requireQueryError requires a Query error answer with the status and
// code.
func requireQueryError(t *testing.T, status int, body []byte, wantStatus int, code string) {
	t.Helper()
	require.Equal(t, wantStatus, status, "%s", body)
	var e queryError
	require.NoError(t, xml.Unmarshal(body, &e), "%s", body)
	require.Equal(t, code, e.Error.Code, "%s", body)
	require.Equal(t, "Sender", e.Error.Type)
	require.NotEmpty(t, e.RequestID)
	require.NotEmpty(t, e.Error.Message)
}

// restQueues is the names of the queues REST lists.
func restQueues(t *testing.T, env *ferrytest.Env) []string {
	t.Helper()
	r := env.Do(http.MethodGet, "/v1/queues", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct{ Queues []struct{ Name string } }
	r.JSON(t, &out)
	names := []string{}
	for _, q := range out.Queues {
		names = append(names, q.Name)
	}
	return names
}

// restHeld is how many messages REST says the queue holds: available,
// in flight and delayed (its stats' in_flight needs its tag: encoding/json
// matches a key to a field name case-insensitively, but not across "_").
func restHeld(t *testing.T, env *ferrytest.Env, queue string) int64 {
	t.Helper()
	s := restStats(t, env, queue)
	return s.Available + s.InFlight + s.Delayed
}

// restInFlight is how many messages REST says the queue holds in flight.
func restInFlight(t *testing.T, env *ferrytest.Env, queue string) int64 {
	t.Helper()
	return restStats(t, env, queue).InFlight
}

// queueStats is the stats of a REST queue.
type queueStats struct {
	Available int64 `json:"available"`
	InFlight  int64 `json:"in_flight"`
	Delayed   int64 `json:"delayed"`
}

// restStats is the queue's stats as REST answers them.
func restStats(t *testing.T, env *ferrytest.Env, queue string) queueStats {
	t.Helper()
	r := env.Do(http.MethodGet, "/v1/queues/"+queue, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Stats queueStats `json:"stats"`
	}
	r.JSON(t, &out)
	return out.Stats
}

// queueURL is the QueueUrl of a queue of env.
func queueURL(env *ferrytest.Env, name string) string {
	return env.URL + "/" + sqsface.AccountID + "/" + name
}

// contains reports whether s contains each of subs.
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestAuthFailuresCounted: the SQS face's refusals for the request's key
// are counted in ferry_auth_failures_total with the REST face's reasons —
// no or an ill-formed signature as missing, an unknown access key id or
// a wrong signature as invalid, AccessDenied as forbidden — and requests
// that are answered, or refused for anything but their key, are not.
func TestAuthFailuresCounted(t *testing.T) {
	t.Parallel()
	env := start(t)
	ctx := context.Background()
	url := createQueue(t, admin(env), "counted", nil)

	step := func(what string, want map[string]float64, do func()) {
		t.Helper()
		before := authFailures(t, env)
		do()
		after := authFailures(t, env)
		for _, reason := range []string{"missing", "invalid", "forbidden"} {
			require.Equal(t, want[reason], after[reason]-before[reason], "%s: ferry_auth_failures_total{reason=%q}", what, reason)
		}
	}
	unsigned := func(authorization string) func() {
		return func() {
			req, err := http.NewRequest(http.MethodPost, env.URL+"/", strings.NewReader("Action=ListQueues"))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if authorization != "" {
				req.Header.Set("Authorization", authorization)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.NotEqual(t, http.StatusOK, resp.StatusCode)
		}
	}
	step("no signature", map[string]float64{"missing": 1}, unsigned(""))
	step("a signature not shaped like SigV4", map[string]float64{"missing": 1}, unsigned("AWS4-HMAC-SHA256 Credential=admin"))
	step("an unknown access key id", map[string]float64{"invalid": 1}, func() {
		_, err := client(env, "key_nobody", "secret").ListQueues(ctx, &awssqs.ListQueuesInput{})
		requireCode(t, err, "InvalidClientTokenId")
	})
	step("a wrong secret", map[string]float64{"invalid": 1}, func() {
		_, err := client(env, "admin", ferrytest.AdminKey+"x").ListQueues(ctx, &awssqs.ListQueuesInput{})
		requireCode(t, err, "SignatureDoesNotMatch")
	})
	step("a key without the permission", map[string]float64{"forbidden": 1}, func() {
		_, err := client(env, scopedID, scopedSecret).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")})
		requireCode(t, err, "AccessDenied")
	})
	step("answered, or refused for another reason", nil, func() {
		_, err := admin(env).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")})
		require.NoError(t, err)
		_, err = admin(env).GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("absent")})
		requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
		_, err = client(env, scopedID, scopedSecret).GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders-absent")})
		requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	})
}

// authFailures is env's ferry_auth_failures_total by reason.
func authFailures(t *testing.T, env *ferrytest.Env) map[string]float64 {
	t.Helper()
	r := env.Do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status)
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `ferry_auth_failures_total{reason="`)
		if !ok {
			continue
		}
		reason, value, ok := strings.Cut(rest, `"} `)
		require.True(t, ok, sc.Text())
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, sc.Text())
		out[reason] = v
	}
	require.Len(t, out, 3, "every reason is exported")
	return out
}

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

// TestSignatureAttacks: a request that is not signed right by a key Ferry
// knows gets SQS's code and writes nothing.
func TestSignatureAttacks(t *testing.T) {
	t.Parallel()
	env := start(t)
	send := url.Values{"Action": {"CreateQueue"}, "QueueName": {"attacked"}}
	cases := []struct {
		name  string
		req   queryRequest
		alter func([]byte) []byte
		code  string
	}{
		{"wrong secret", queryRequest{params: send, id: "admin", secret: "not-the-admin-key-0000"}, nil, "SignatureDoesNotMatch"},
		{"old date", queryRequest{params: send, at: time.Now().Add(-20 * time.Minute)}, nil, "SignatureDoesNotMatch"},
		{"unknown key", queryRequest{params: send, id: "key_unknown", secret: "whatever-secret-000"}, nil, "InvalidClientTokenId"},
		{"altered body", queryRequest{params: send}, func(b []byte) []byte { return bytes.Replace(b, []byte("attacked"), []byte("attackex"), 1) }, "SignatureDoesNotMatch"},
	}
	for _, tc := range cases {
		status, body := tc.req.do(t, env, tc.alter)
		requireQueryError(t, status, body, http.StatusForbidden, tc.code)
	}
	// No signature at all, in the JSON protocol.
	resp := post(t, env, http.Header{"X-Amz-Target": {"AmazonSQS.CreateQueue"}, "Content-Type": {"application/x-amz-json-1.0"}}, `{"QueueName":"attacked"}`, false)
	requireJSONError(t, resp, http.StatusForbidden, "MissingAuthenticationToken")
	require.NotContains(t, restQueues(t, env), "attacked")
}
