package sigv4

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

// fakeSQS is an httptest handler that verifies every request as the SQS
// face will, on the request exactly as Go's server delivers it, and answers
// just enough of the JSON protocol for the SDK to parse.
type fakeSQS struct {
	verifier *Verifier
	skew     time.Duration // the server's clock minus the real one

	mu      sync.Mutex
	signed  []Signed
	refused []*Error
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now().Add(f.skew)
	w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	signed, err := f.verifier.Verify(r, body, now)
	var e *Error
	if errors.As(err, &e) {
		f.record(Signed{}, e)
		w.Header().Set("X-Amzn-Query-Error", string(e.Code)+";Sender")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(e.HTTPStatus())
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + string(e.Code), "message": e.Message})
		return
	} else if err != nil {
		http.Error(w, "internal failure", http.StatusInternalServerError)
		return
	}
	f.record(signed, nil)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(fakeAnswer(r.Header.Get("X-Amz-Target"), body))
}

func (f *fakeSQS) record(s Signed, e *Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e != nil {
		f.refused = append(f.refused, e)
	} else {
		f.signed = append(f.signed, s)
	}
}

func (f *fakeSQS) results() ([]Signed, []*Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Signed(nil), f.signed...), append([]*Error(nil), f.refused...)
}

// fakeAnswer is a minimal successful answer to a JSON-protocol action; a
// Query-protocol request gets an empty object.
func fakeAnswer(target string, body []byte) map[string]any {
	var in struct{ QueueName, MessageBody string }
	_ = json.Unmarshal(body, &in)
	switch target {
	case "AmazonSQS.GetQueueUrl":
		return map[string]any{"QueueUrl": "http://127.0.0.1/000000000000/" + in.QueueName}
	case "AmazonSQS.SendMessage":
		sum := md5.Sum([]byte(in.MessageBody))
		return map[string]any{"MessageId": "m-1", "MD5OfMessageBody": hex.EncodeToString(sum[:])}
	case "AmazonSQS.ListQueues":
		return map[string]any{"QueueUrls": []string{}}
	}
	return map[string]any{}
}

func startFakeSQS(t *testing.T, skew time.Duration) (*fakeSQS, *httptest.Server) {
	f := &fakeSQS{verifier: testVerifier(), skew: skew}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// TestVerifyOnHTTPServer: requests signed with the SDK's signer and sent by
// Go's HTTP client verify as the server receives them; one sent with a body
// other than the signed one is refused.
func TestVerifyOnHTTPServer(t *testing.T) {
	t.Parallel()
	f, srv := startFakeSQS(t, 0)
	form := url.Values{"Action": {"SendMessage"}, "MessageBody": {"ünïcode & spaces"}}
	requests := []func() (*http.Request, []byte){
		func() (*http.Request, []byte) { return queryRequest(t, srv.URL+"/", form) },
		func() (*http.Request, []byte) { return queryRequest(t, srv.URL+"/000000000000/queue-name", form) },
		func() (*http.Request, []byte) {
			return queryRequest(t, srv.URL+"/000000000000/"+url.PathEscape("queue name:ü(1)"), form)
		},
		func() (*http.Request, []byte) {
			r, body := jsonRequest(t, "ListQueues", `{"QueueNamePrefix":"a b"}`)
			r.URL, r.Host = mustParse(t, srv.URL+"/"), ""
			return r, body
		},
		func() (*http.Request, []byte) {
			r, err := http.NewRequest(http.MethodGet, srv.URL+"/?Action=ListQueues&QueueNamePrefix=a%2Fb%20c", nil)
			require.NoError(t, err)
			return r, nil
		},
	}
	for _, build := range requests {
		r, body := build()
		s := defaultSigner()
		s.at = time.Now()
		s.sign(t, r, body)
		resp, err := srv.Client().Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s", r.Method, r.URL)
	}

	r, body := queryRequest(t, srv.URL+"/", form)
	s := defaultSigner()
	s.at = time.Now()
	s.sign(t, r, body)
	other := strings.Replace(string(body), "SendMessage", "DeleteQueue", 1)
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(other)), int64(len(other))
	resp, err := srv.Client().Do(r)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	signed, refused := f.results()
	require.Len(t, signed, len(requests))
	for _, s := range signed {
		require.Equal(t, testKeyID, s.AccessKeyID)
	}
	require.Len(t, refused, 1)
	require.Equal(t, SignatureDoesNotMatch, refused[0].Code)
}

func mustParse(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

func sdkClient(srv *httptest.Server, keyID, secret string, retryer aws.Retryer) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "eu-central-1",
		BaseEndpoint: aws.String(srv.URL), // the SDK's own HTTP client
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret, Source: "test"}, nil
		}),
		Retryer: retryer,
	})
}

// TestVerifySDKClient: aws-sdk-go-v2's real SQS client (AWS JSON 1.0,
// its own signing middleware, its own default HTTP client) is verified by a
// Go server; wrong secrets and unknown keys come back to it as SQS's codes.
func TestVerifySDKClient(t *testing.T) {
	t.Parallel()
	f, srv := startFakeSQS(t, 0)
	ctx := context.Background()

	c := sdkClient(srv, testKeyID, testSecret, aws.NopRetryer{})
	_, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("orders")})
	require.NoError(t, err)
	got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders.fifo")})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1/000000000000/orders.fifo", *got.QueueUrl)
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: got.QueueUrl, MessageBody: aws.String("héllo \u2603 {\"json\": true}")})
	require.NoError(t, err)
	signed, refused := f.results()
	require.Len(t, signed, 3)
	require.Empty(t, refused)
	require.Equal(t, Signed{AccessKeyID: testKeyID, Region: "eu-central-1", Time: signed[0].Time}, signed[0])

	for _, k := range []struct {
		keyID, secret string
		code          Code
	}{
		{testKeyID, "wrong secret", SignatureDoesNotMatch},
		{"key_404", testSecret, InvalidClientTokenId},
	} {
		_, err := sdkClient(srv, k.keyID, k.secret, aws.NopRetryer{}).ListQueues(ctx, &sqs.ListQueuesInput{})
		var apiErr smithy.APIError
		require.True(t, errors.As(err, &apiErr), "%v", err)
		require.Equal(t, string(k.code), apiErr.ErrorCode())
	}
}

// TestVerifyClockSkewRetried: SQS's answer to a skewed clock
// (SignatureDoesNotMatch, with the server's Date) lets aws-sdk-go-v2
// correct its clock and retry, which is why Verify does not answer
// RequestExpired (the SDK gives up on that at once).
func TestVerifyClockSkewRetried(t *testing.T) {
	t.Parallel()
	f, srv := startFakeSQS(t, 20*time.Minute)
	_, err := sdkClient(srv, testKeyID, testSecret, nil).ListQueues(context.Background(), &sqs.ListQueuesInput{})
	require.NoError(t, err)
	signed, refused := f.results()
	require.Len(t, refused, 1)
	require.True(t, refused[0].Expired)
	require.Len(t, signed, 1)
}
