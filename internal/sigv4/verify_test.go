package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
)

// validRequests are requests a real client makes, signed by the SDK's signer.
func validRequests(t testing.TB) map[string]func() (*http.Request, []byte) {
	form := url.Values{"Action": {"SendMessage"}, "Version": {"2012-11-05"}, "MessageBody": {"héllo wörld & <x> +1"}}
	return map[string]func() (*http.Request, []byte){
		"json SendMessage": func() (*http.Request, []byte) {
			return jsonRequest(t, "SendMessage", `{"QueueUrl":"http://127.0.0.1:8080/000000000000/orders","MessageBody":"héllo"}`)
		},
		"json ListQueues empty object": func() (*http.Request, []byte) { return jsonRequest(t, "ListQueues", `{}`) },
		"query POST /": func() (*http.Request, []byte) {
			return queryRequest(t, "http://localhost:8080/", form)
		},
		"query POST to a QueueUrl": func() (*http.Request, []byte) {
			return queryRequest(t, "http://localhost:8080/000000000000/queue-name", form)
		},
		"query POST to a QueueUrl needing encoding": func() (*http.Request, []byte) {
			u := &url.URL{Scheme: "http", Host: "localhost:8080", Path: "/000000000000/my queue:ü(1)+*=$!"}
			return queryRequest(t, u.String(), form)
		},
		"query GET with a query string": func() (*http.Request, []byte) {
			q := "Action=ListQueues&QueueNamePrefix=a%20b%2Bc%2F%C3%BC&Tag=a-b&Tag=a%2Fb&Version=2012-11-05&empty="
			r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/?"+q, nil)
			require.NoError(t, err)
			return r, nil
		},
		"query GET with '+' for space": func() (*http.Request, []byte) {
			r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/?Action=ListQueues&QueueNamePrefix=a+b", nil)
			require.NoError(t, err)
			return r, nil
		},
		"repeated and spaced header values": func() (*http.Request, []byte) {
			r, body := jsonRequest(t, "ListQueues", `{}`)
			r.Header.Add("X-Custom", "  one   two  ")
			r.Header.Add("X-Custom", "three")
			return r, body
		},
	}
}

// TestVerifySDKSigned: requests signed by aws-sdk-go-v2's signer verify,
// both as built in-process and as a server reads them off the wire.
func TestVerifySDKSigned(t *testing.T) {
	t.Parallel()
	for name, build := range validRequests(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, body := build()
			defaultSigner().sign(t, r, body)
			want := Signed{AccessKeyID: testKeyID, Region: testRegion, Time: signedAt}

			got, err := testVerifier().Verify(r, body, signedAt)
			require.NoError(t, err, "in-process")
			require.Equal(t, want, got)

			r2, body2 := arrive(t, r)
			require.Equal(t, string(body), string(body2))
			got, err = testVerifier().Verify(r2, body2, signedAt)
			require.NoError(t, err, "off the wire")
			require.Equal(t, want, got)
		})
	}
}

// TestVerifyAccepts: what may change without breaking a signature.
func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		signer signer
		change func(r *http.Request)
		now    time.Time
	}{
		"any region":            {signer: signer{keyID: testKeyID, secret: testSecret, service: "sqs", region: "local", at: signedAt}},
		"15 minutes later":      {now: signedAt.Add(MaxSkew)},
		"15 minutes earlier":    {now: signedAt.Add(-MaxSkew)},
		"unsigned header added": {change: func(r *http.Request) { r.Header.Set("X-Forwarded-For", "10.0.0.1") }},
		"user agent changed":    {change: func(r *http.Request) { r.Header.Set("User-Agent", "something/else") }},
		"authorization without spaces": {change: func(r *http.Request) {
			r.Header.Set("Authorization", strings.ReplaceAll(r.Header.Get("Authorization"), ", ", ","))
		}},
		"content sha256 repeating the body's hash": {change: func(r *http.Request) {
			r.Header.Set("X-Amz-Content-Sha256", sha256Hex([]byte(`{}`)))
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := c.signer
			if s.keyID == "" {
				s = defaultSigner()
			}
			r, body := jsonRequest(t, "ListQueues", `{}`)
			s.sign(t, r, body)
			r, body = arrive(t, r)
			if c.change != nil {
				c.change(r)
			}
			now := c.now
			if now.IsZero() {
				now = signedAt
			}
			got, err := testVerifier().Verify(r, body, now)
			require.NoError(t, err)
			require.Equal(t, s.region, got.Region)
		})
	}
}

// attack is a request made from a good one, and how Verify must refuse it.
type attack struct {
	signer  func(*signer)
	change  func(r *http.Request, body *[]byte)
	now     time.Duration // from signedAt
	code    Code
	expired bool
	message string // a part of the message
}

// TestVerifyAttacks: every change to what was signed, every wrong key, time
// or scope, is refused with SQS's code.
func TestVerifyAttacks(t *testing.T) {
	t.Parallel()
	cases := map[string]attack{
		"wrong secret":              {signer: func(s *signer) { s.secret = "not-the-secret" }, code: SignatureDoesNotMatch, message: "does not match"},
		"unknown access key id":     {signer: func(s *signer) { s.keyID = "key_404" }, code: InvalidClientTokenId},
		"replayed 16 minutes later": {now: 16 * time.Minute, code: SignatureDoesNotMatch, expired: true, message: "Signature expired: 20260314T150926Z is now earlier than 20260314T151026Z (20260314T152526Z - 15 min.)"},
		"dated 16 minutes ahead":    {now: -16 * time.Minute, code: SignatureDoesNotMatch, expired: true, message: "Signature not yet current"},
		"scope service s3":          {signer: func(s *signer) { s.service = "s3" }, code: SignatureDoesNotMatch, message: "Credential should be scoped to correct service: 'sqs'."},
		"altered body":              {change: func(_ *http.Request, b *[]byte) { *b = []byte(strings.Replace(string(*b), "orders", "0rders", 1)) }, code: SignatureDoesNotMatch},
		"longer body":               {change: func(_ *http.Request, b *[]byte) { *b = append(*b, ' ') }, code: SignatureDoesNotMatch},
		"empty body":                {change: func(_ *http.Request, b *[]byte) { *b = nil }, code: SignatureDoesNotMatch},
		"altered signed header":     {change: func(r *http.Request, _ *[]byte) { r.Header.Set("X-Amz-Target", "AmazonSQS.DeleteQueue") }, code: SignatureDoesNotMatch},
		"signed header removed":     {change: func(r *http.Request, _ *[]byte) { r.Header.Del("X-Amz-Target") }, code: SignatureDoesNotMatch},
		"signed header repeated":    {change: func(r *http.Request, _ *[]byte) { r.Header.Add("X-Amz-Target", "AmazonSQS.SendMessage") }, code: SignatureDoesNotMatch},
		"host changed":              {change: func(r *http.Request, _ *[]byte) { r.Host = "ferry.example:8080" }, code: SignatureDoesNotMatch},
		"method changed":            {change: func(r *http.Request, _ *[]byte) { r.Method = http.MethodPut }, code: SignatureDoesNotMatch},
		"path changed":              {change: func(r *http.Request, _ *[]byte) { r.RequestURI = "/000000000000/orders" }, code: SignatureDoesNotMatch},
		"query added":               {change: func(r *http.Request, _ *[]byte) { r.URL.RawQuery = "Action=DeleteQueue" }, code: SignatureDoesNotMatch},
		"date moved one second":     {change: func(r *http.Request, _ *[]byte) { r.Header.Set("X-Amz-Date", "20260314T150927Z") }, code: SignatureDoesNotMatch},
		"content sha256 of another body": {change: func(r *http.Request, _ *[]byte) {
			r.Header.Set("X-Amz-Content-Sha256", sha256Hex([]byte("other")))
		}, code: SignatureDoesNotMatch, message: "'x-amz-content-sha256' header does not match"},
		"unsigned payload": {signer: func(s *signer) { s.payloadHash = "UNSIGNED-PAYLOAD" }, change: func(r *http.Request, _ *[]byte) {
			r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		}, code: SignatureDoesNotMatch, message: "UNSIGNED-PAYLOAD"},
		"unsigned payload hash without the header": {signer: func(s *signer) { s.payloadHash = "UNSIGNED-PAYLOAD" }, code: SignatureDoesNotMatch},
		"signature digit flipped": {change: func(r *http.Request, _ *[]byte) {
			r.Header.Set("Authorization", flipLastHexDigit(r.Header.Get("Authorization")))
		}, code: SignatureDoesNotMatch},
		"signature in upper case": {change: func(r *http.Request, _ *[]byte) {
			a := r.Header.Get("Authorization")
			i := strings.Index(a, "Signature=") + len("Signature=")
			r.Header.Set("Authorization", a[:i]+strings.ToUpper(a[i:]))
		}, code: SignatureDoesNotMatch},
		"host not signed": {change: func(r *http.Request, _ *[]byte) {
			setAuthorization(t, r, "SignedHeaders", "content-length;content-type;x-amz-date;x-amz-target")
		}, code: SignatureDoesNotMatch, message: "'Host'"},
		"signed header dropped from the list": {change: func(r *http.Request, _ *[]byte) {
			setAuthorization(t, r, "SignedHeaders", "content-length;content-type;host;x-amz-date")
		}, code: SignatureDoesNotMatch},
		"signed headers unsorted": {change: func(r *http.Request, _ *[]byte) {
			setAuthorization(t, r, "SignedHeaders", "host;content-length")
		}, code: SignatureDoesNotMatch, message: "sorted"},
		"authorization removed": {change: func(r *http.Request, _ *[]byte) { r.Header.Del("Authorization") }, code: MissingAuthenticationToken},
		"date removed":          {change: func(r *http.Request, _ *[]byte) { r.Header.Del("X-Amz-Date") }, code: IncompleteSignature},
		"two authorization headers": {change: func(r *http.Request, _ *[]byte) {
			r.Header.Add("Authorization", r.Header.Get("Authorization"))
		}, code: IncompleteSignature},
		"header and presigned auth": {change: func(r *http.Request, _ *[]byte) {
			r.URL.RawQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256"
		}, code: IncompleteSignature},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := defaultSigner()
			if c.signer != nil {
				c.signer(&s)
			}
			r, body := jsonRequest(t, "SendMessage", `{"QueueUrl":"http://127.0.0.1:8080/000000000000/orders","MessageBody":"x"}`)
			s.sign(t, r, body)
			r, body = arrive(t, r)
			if c.change != nil {
				c.change(r, &body)
			}
			_, err := testVerifier().Verify(r, body, signedAt.Add(c.now))
			e := requireCode(t, err, c.code)
			require.Equal(t, c.expired, e.Expired)
			require.Contains(t, e.Message, c.message)
		})
	}
}

func flipLastHexDigit(s string) string {
	last := s[len(s)-1]
	if last == '0' {
		return s[:len(s)-1] + "1"
	}
	return s[:len(s)-1] + "0"
}

// TestVerifyMismatchExplains: a wrong signature comes with the canonical
// request and string to sign the server computed, as AWS shows them.
func TestVerifyMismatchExplains(t *testing.T) {
	t.Parallel()
	r, body := queryRequest(t, "http://localhost:8080/000000000000/my%20queue", url.Values{"Action": {"PurgeQueue"}})
	s := defaultSigner()
	s.secret = "wrong"
	s.sign(t, r, body)
	r, body = arrive(t, r)
	_, err := testVerifier().Verify(r, body, signedAt)
	e := requireCode(t, err, SignatureDoesNotMatch)
	require.Equal(t, strings.Join([]string{
		"POST",
		"/000000000000/my%2520queue",
		"",
		"content-length:17",
		"content-type:application/x-www-form-urlencoded; charset=utf-8",
		"host:localhost:8080",
		"x-amz-date:20260314T150926Z",
		"",
		"content-length;content-type;host;x-amz-date",
		sha256Hex([]byte("Action=PurgeQueue")),
	}, "\n"), e.CanonicalRequest)
	require.True(t, strings.HasPrefix(e.StringToSign, "AWS4-HMAC-SHA256\n20260314T150926Z\n20260314/us-east-1/sqs/aws4_request\n"), e.StringToSign)
	require.Equal(t, 403, e.HTTPStatus())
}

// TestVerifyScopeDayMismatch: a credential scoped to one day with an
// X-Amz-Date of the next is refused, even when both are within the skew.
func TestVerifyScopeDayMismatch(t *testing.T) {
	t.Parallel()
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	s := defaultSigner()
	s.at = midnight.Add(-10 * time.Second)
	r, body := jsonRequest(t, "ListQueues", `{}`)
	s.sign(t, r, body)
	r, body = arrive(t, r)
	r.Header.Set("X-Amz-Date", "20260315T000005Z")
	_, err := testVerifier().Verify(r, body, midnight)
	e := requireCode(t, err, SignatureDoesNotMatch)
	require.Equal(t, "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '20260314' != '20260315', from '20260315T000005Z'.", e.Message)
	require.False(t, e.Expired)
}

// TestVerifyBadDate: an X-Amz-Date that is not ISO 8601 basic format.
func TestVerifyBadDate(t *testing.T) {
	t.Parallel()
	for _, date := range []string{"2026-03-14T15:09:26Z", "20260314T150926", "20260314T150926ZZ", "yesterday", ""} {
		r, body := jsonRequest(t, "ListQueues", `{}`)
		defaultSigner().sign(t, r, body)
		r.Header.Set("X-Amz-Date", date)
		_, err := testVerifier().Verify(r, body, signedAt)
		e := requireCode(t, err, IncompleteSignature)
		require.Equal(t, 400, e.HTTPStatus())
	}
}

// TestVerifyKeyLookup: a failed lookup is the server's error, not the
// client's; an empty secret is no key.
func TestVerifyKeyLookup(t *testing.T) {
	t.Parallel()
	down := errors.New("database is down")
	r, body := jsonRequest(t, "ListQueues", `{}`)
	defaultSigner().sign(t, r, body)

	v := &Verifier{Service: "sqs", Secret: func(context.Context, string) (string, error) { return "", down }}
	_, err := v.Verify(r, body, signedAt)
	require.ErrorIs(t, err, down)
	var e *Error
	require.False(t, errors.As(err, &e))

	v = &Verifier{Service: "sqs", Secret: func(context.Context, string) (string, error) { return "", nil }}
	_, err = v.Verify(r, body, signedAt)
	requireCode(t, err, InvalidClientTokenId)
}

// TestVerifyPresigned: query-string authentication made by the SDK's
// PresignHTTP, and its attacks.
func TestVerifyPresigned(t *testing.T) {
	t.Parallel()
	presigned := func(t *testing.T, query string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/000000000000/orders?"+query, nil)
		require.NoError(t, err)
		u := defaultSigner().presign(t, r, nil)
		r, err = http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		r, _ = arrive(t, r)
		return r
	}
	const query = "Action=ReceiveMessage&MaxNumberOfMessages=10&X-Amz-Expires=300"

	t.Run("verifies", func(t *testing.T) {
		got, err := testVerifier().Verify(presigned(t, query), nil, signedAt.Add(4*time.Minute))
		require.NoError(t, err)
		require.Equal(t, Signed{AccessKeyID: testKeyID, Region: testRegion, Time: signedAt, Presigned: true}, got)
	})
	cases := map[string]struct {
		query   string
		change  func(r *http.Request)
		now     time.Duration
		code    Code
		expired bool
	}{
		"parameter changed": {change: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "MaxNumberOfMessages=10", "MaxNumberOfMessages=1", 1)
		}, code: SignatureDoesNotMatch},
		"parameter added":             {change: func(r *http.Request) { r.URL.RawQuery += "&VisibilityTimeout=0" }, code: SignatureDoesNotMatch},
		"past X-Amz-Expires":          {now: 6 * time.Minute, code: SignatureDoesNotMatch, expired: true},
		"no X-Amz-Expires, 16 min on": {query: "Action=ReceiveMessage", now: 16 * time.Minute, code: SignatureDoesNotMatch, expired: true},
		"a week's X-Amz-Expires still ends at 15 min": {query: "Action=ReceiveMessage&X-Amz-Expires=604800", now: 16 * time.Minute,
			code: SignatureDoesNotMatch, expired: true},
		"signature removed": {change: func(r *http.Request) {
			q := r.URL.Query()
			q.Del("X-Amz-Signature")
			r.URL.RawQuery = q.Encode()
		}, code: IncompleteSignature},
		"bad X-Amz-Expires": {query: "Action=ReceiveMessage&X-Amz-Expires=0", code: IncompleteSignature},
		"body added":        {change: func(r *http.Request) {}, code: SignatureDoesNotMatch},
		"header auth too": {change: func(r *http.Request) {
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=x")
		}, code: IncompleteSignature},
		"query not url encoding": {change: func(r *http.Request) { r.URL.RawQuery += "&bad=%zz" }, code: SignatureDoesNotMatch},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			q := c.query
			if q == "" {
				q = query
			}
			r := presigned(t, q)
			c.change = orNoop(c.change)
			c.change(r)
			var body []byte
			if name == "body added" {
				body = []byte("Action=DeleteQueue")
			}
			_, err := testVerifier().Verify(r, body, signedAt.Add(c.now))
			e := requireCode(t, err, c.code)
			require.Equal(t, c.expired, e.Expired, e.Message)
		})
	}
}

func orNoop(f func(*http.Request)) func(*http.Request) {
	if f == nil {
		return func(*http.Request) {}
	}
	return f
}

// TestVerifyBounds: oversized input is refused before any real work.
func TestVerifyBounds(t *testing.T) {
	t.Parallel()
	t.Run("query parameters", func(t *testing.T) {
		r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/?"+strings.Repeat("a=1&", maxQueryParams+1), nil)
		require.NoError(t, err)
		defaultSigner().sign(t, r, nil)
		_, err = testVerifier().Verify(r, nil, signedAt)
		requireCode(t, err, SignatureDoesNotMatch)
	})
	t.Run("query bytes", func(t *testing.T) {
		r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/?a="+strings.Repeat("x", maxQueryLen), nil)
		require.NoError(t, err)
		defaultSigner().sign(t, r, nil)
		_, err = testVerifier().Verify(r, nil, signedAt)
		requireCode(t, err, SignatureDoesNotMatch)
	})
	t.Run("signed header values", func(t *testing.T) {
		r, body := jsonRequest(t, "ListQueues", `{}`)
		r.Header.Set("X-Big", strings.Repeat("x", maxHeaderBytes))
		defaultSigner().sign(t, r, body)
		_, err := testVerifier().Verify(r, body, signedAt)
		e := requireCode(t, err, SignatureDoesNotMatch)
		require.Contains(t, e.Message, "longer than")
	})
	t.Run("signed header values just within", func(t *testing.T) {
		r, body := jsonRequest(t, "ListQueues", `{}`)
		r.Header.Set("X-Big", strings.Repeat("x", maxHeaderBytes/2))
		defaultSigner().sign(t, r, body)
		_, err := testVerifier().Verify(r, body, signedAt)
		require.NoError(t, err)
	})
}

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

// FuzzVerify feeds Verify raw HTTP requests, seeded with good signed ones
// (JSON, Query, presigned, an encoded path). Verify must never panic, and
// whatever it accepts the real SDK signer must sign to the very same
// signature: then the request is the one that was signed, judged by the
// SDK's canonicalisation rather than by Verify's own.
func FuzzVerify(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: AWS4-HMAC-SHA256 Credential=key_42/20260314/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00\r\nX-Amz-Date: 20260314T150926Z\r\n\r\n"))
	f.Add([]byte("GET /?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=key_42%2F20260314%2Fus-east-1%2Fsqs%2Faws4_request HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return
		}
		signed, err := testVerifier().Verify(r, body, signedAt)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code == "" || e.Message == "" {
				t.Fatalf("Verify failed without an *Error carrying a code and message: %#v", err)
			}
			return
		}
		claimed, again := resignWithSDK(t, r, body, signed)
		if claimed != again {
			t.Fatalf("accepted a request the SDK signs differently:\n%q\nclaimed %s, SDK %s", raw, claimed, again)
		}
	})
}

// fuzzSeeds are good requests in wire format.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	add := func(r *http.Request) {
		var wire bytes.Buffer
		if err := r.Write(&wire); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, wire.Bytes())
	}
	s := defaultSigner()
	for _, build := range validRequests(tb) {
		r, body := build()
		s.sign(tb, r, body)
		add(r)
	}
	r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/000000000000/orders?Action=ReceiveMessage&X-Amz-Expires=300", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r, err = http.NewRequest(http.MethodGet, s.presign(tb, r, nil), nil)
	if err != nil {
		tb.Fatal(err)
	}
	add(r)
	return seeds
}

// resignWithSDK signs, with aws-sdk-go-v2's signer, a request made of only
// what r signed (its method, wire path, query, signed headers, body hash,
// date and scope) and returns r's signature and the SDK's.
func resignWithSDK(t *testing.T, r *http.Request, body []byte, signed Signed) (claimed, sdk string) {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: signed.AccessKeyID, SecretAccessKey: testSecrets[signed.AccessKeyID]}
	path := r.URL.EscapedPath()
	if strings.HasPrefix(r.RequestURI, "/") {
		path, _, _ = strings.Cut(r.RequestURI, "?")
	}
	query := r.URL.Query()
	var signedHeaders string
	if signed.Presigned {
		claimed, signedHeaders = query.Get(qSignature), query.Get(qSignedHeaders)
		for _, k := range []string{qAlgorithm, qCredential, qDate, qSignedHeaders, qSignature} {
			query.Del(k)
		}
	} else {
		_, parts, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		for part := range strings.SplitSeq(parts, ",") {
			switch k, v, _ := strings.Cut(strings.TrimSpace(part), "="); k {
			case "Signature":
				claimed = v
			case "SignedHeaders":
				signedHeaders = v
			}
		}
	}
	again := &http.Request{Method: r.Method, Host: r.Host, Header: http.Header{},
		URL: &url.URL{Opaque: "//" + r.Host + path, RawQuery: query.Encode()}}
	for name := range strings.SplitSeq(signedHeaders, ";") {
		switch name {
		case "host", "x-amz-date":
		case "content-length":
			again.ContentLength, _ = strconv.ParseInt(r.Header.Get(name), 10, 64)
		default:
			again.Header[http.CanonicalHeaderKey(name)] = r.Header.Values(name)
		}
	}
	hash := sha256Hex(body)
	signer := v4.NewSigner()
	if !signed.Presigned {
		if err := signer.SignHTTP(context.Background(), creds, again, hash, "sqs", signed.Region, signed.Time); err != nil {
			t.Fatal(err)
		}
		_, sdk, _ = strings.Cut(again.Header.Get("Authorization"), "Signature=")
		return claimed, sdk
	}
	u, _, err := signer.PresignHTTP(context.Background(), creds, again, hash, "sqs", signed.Region, signed.Time)
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return claimed, pu.Query().Get(qSignature)
}
