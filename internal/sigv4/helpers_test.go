package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"
)

// The keys the tests' verifier knows. The secret has the characters a real
// secret access key has ('/' and '+').
const (
	testKeyID  = "key_42"
	testSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYFERRYKEY"
	testRegion = "us-east-1"
)

// signedAt is when the tests sign, and the verifier's clock unless a test
// moves it.
var signedAt = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

var testSecrets = map[string]string{testKeyID: testSecret, "admin": "admin-secret"}

func lookupTestSecret(_ context.Context, id string) (string, error) {
	if s, ok := testSecrets[id]; ok {
		return s, nil
	}
	return "", ErrUnknownKey
}

func testVerifier() *Verifier {
	return &Verifier{Service: "sqs", Secret: lookupTestSecret}
}

// signer is how a test signs: the defaults are a good SQS client's.
type signer struct {
	keyID, secret, service, region string
	at                             time.Time
	payloadHash                    string // "" → SHA-256 of the body
}

func defaultSigner() signer {
	return signer{keyID: testKeyID, secret: testSecret, service: "sqs", region: testRegion, at: signedAt}
}

// sign signs r with aws-sdk-go-v2's own SigV4 signer, as its SQS client's
// middleware does (payload hash of the body, service "sqs").
func (s signer) sign(t testing.TB, r *http.Request, body []byte) {
	t.Helper()
	hash := s.payloadHash
	if hash == "" {
		hash = sha256Hex(body)
	}
	creds := aws.Credentials{AccessKeyID: s.keyID, SecretAccessKey: s.secret}
	require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), creds, r, hash, s.service, s.region, s.at))
}

// presign makes a presigned URL for r with the SDK's signer.
func (s signer) presign(t testing.TB, r *http.Request, body []byte) string {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: s.keyID, SecretAccessKey: s.secret}
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, r, sha256Hex(body), s.service, s.region, s.at)
	require.NoError(t, err)
	return u
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// jsonRequest is an AWS JSON 1.0 call as aws-sdk-go-v2's SQS client makes it.
func jsonRequest(t testing.TB, action, body string) (*http.Request, []byte) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/", strings.NewReader(body))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/x-amz-json-1.0")
	r.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	r.Header.Set("X-Amzn-Query-Mode", "true")
	r.Header.Set("Amz-Sdk-Invocation-Id", "0b7a4c52-0d7e-4f5a-9f0e-5d2b7c1e9a11")
	r.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
	return r, []byte(body)
}

// queryRequest is a Query-protocol call: a form posted to rawURL.
func queryRequest(t testing.TB, rawURL string, form url.Values) (*http.Request, []byte) {
	t.Helper()
	body := form.Encode()
	r, err := http.NewRequest(http.MethodPost, rawURL, strings.NewReader(body))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	return r, []byte(body)
}

// arrive sends r through HTTP/1.1 wire format and reads it back as Go's
// server does (RequestURI, Host, header map), with its body read.
func arrive(t testing.TB, r *http.Request) (*http.Request, []byte) {
	t.Helper()
	var wire bytes.Buffer
	require.NoError(t, r.Write(&wire))
	got, err := http.ReadRequest(bufio.NewReader(&wire))
	require.NoError(t, err)
	body, err := io.ReadAll(got.Body)
	require.NoError(t, err)
	return got, body
}

// requireCode asserts err is an *Error with code and returns it.
func requireCode(t testing.TB, err error, code Code) *Error {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "want *Error %s, got %v", code, err)
	require.Equal(t, code, e.Code, "message: %s", e.Message)
	return e
}

// setAuthorization replaces one part of a signed Authorization header.
func setAuthorization(t testing.TB, r *http.Request, part, value string) {
	t.Helper()
	auth := r.Header.Get("Authorization")
	var parts []string
	alg, rest, _ := strings.Cut(auth, " ")
	for p := range strings.SplitSeq(rest, ", ") {
		if k, _, _ := strings.Cut(p, "="); k == part {
			p = part + "=" + value
		}
		parts = append(parts, p)
	}
	r.Header.Set("Authorization", alg+" "+strings.Join(parts, ", "))
}
