package sqs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
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

// restAvailable is how many messages REST says the queue holds available.
func restAvailable(t *testing.T, env *ferrytest.Env, queue string) int64 {
	t.Helper()
	r := env.Do(http.MethodGet, "/v1/queues/"+queue, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Stats struct{ Available, InFlight, Delayed int64 }
	}
	r.JSON(t, &out)
	return out.Stats.Available + out.Stats.InFlight + out.Stats.Delayed
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
