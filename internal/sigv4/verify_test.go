package sigv4

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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

// TestVerifyMalformedAuthorization: junk in the Authorization header gets a
// clear code and never a lookup.
func TestVerifyMalformedAuthorization(t *testing.T) {
	t.Parallel()
	const cred = "Credential=key_42/20260314/us-east-1/sqs/aws4_request"
	const sh = "SignedHeaders=host;x-amz-date"
	sig := "Signature=" + strings.Repeat("ab", 32)
	cases := map[string]struct {
		auth string
		code Code
	}{
		"empty":                      {"", IncompleteSignature},
		"bearer":                     {"Bearer key_42.secret", IncompleteSignature},
		"sigv2":                      {"AWS key_42:c2lnbmF0dXJl", IncompleteSignature},
		"sigv4a":                     {"AWS4-ECDSA-P256-SHA256 " + cred + ", " + sh + ", " + sig, IncompleteSignature},
		"algorithm only":             {"AWS4-HMAC-SHA256", IncompleteSignature},
		"credential only":            {"AWS4-HMAC-SHA256 " + cred, IncompleteSignature},
		"no signature":               {"AWS4-HMAC-SHA256 " + cred + ", " + sh, IncompleteSignature},
		"empty signature":            {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", Signature=", IncompleteSignature},
		"duplicate credential":       {"AWS4-HMAC-SHA256 " + cred + ", " + cred + ", " + sh + ", " + sig, IncompleteSignature},
		"unknown part":               {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", " + sig + ", Foo=bar", IncompleteSignature},
		"part without '='":           {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", " + sig + ", junk", IncompleteSignature},
		"too long":                   {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", " + sig + strings.Repeat(" ", 9000), IncompleteSignature},
		"truncated signature":        {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", " + sig[:len(sig)-1], SignatureDoesNotMatch},
		"signature not hex":          {"AWS4-HMAC-SHA256 " + cred + ", " + sh + ", Signature=" + strings.Repeat("zz", 32), SignatureDoesNotMatch},
		"credential of 3 parts":      {"AWS4-HMAC-SHA256 Credential=key_42/20260314/sqs, " + sh + ", " + sig, SignatureDoesNotMatch},
		"bad terminator":             {"AWS4-HMAC-SHA256 Credential=key_42/20260314/us-east-1/sqs/aws4_requestX, " + sh + ", " + sig, SignatureDoesNotMatch},
		"bad region":                 {"AWS4-HMAC-SHA256 Credential=key_42/20260314/us east!/sqs/aws4_request, " + sh + ", " + sig, SignatureDoesNotMatch},
		"empty key id":               {"AWS4-HMAC-SHA256 Credential=/20260314/us-east-1/sqs/aws4_request, " + sh + ", " + sig, InvalidClientTokenId},
		"key id too long":            {"AWS4-HMAC-SHA256 Credential=" + strings.Repeat("k", 200) + "/20260314/us-east-1/sqs/aws4_request, " + sh + ", " + sig, InvalidClientTokenId},
		"upper case signed header":   {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=Host;X-Amz-Date, " + sig, SignatureDoesNotMatch},
		"empty signed header name":   {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;;x-amz-date, " + sig, SignatureDoesNotMatch},
		"65 signed headers":          {"AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=" + manyHeaderNames(65) + ", " + sig, SignatureDoesNotMatch},
		"credential too long":        {"AWS4-HMAC-SHA256 Credential=" + strings.Repeat("k/", 300) + ", " + sh + ", " + sig, SignatureDoesNotMatch},
		"control characters in part": {"AWS4-HMAC-SHA256 \x00\x01=\x02", IncompleteSignature},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, body := jsonRequest(t, "ListQueues", `{}`)
			r.Header.Set("X-Amz-Date", "20260314T150926Z")
			r.Header.Set("Authorization", c.auth)
			v := &Verifier{Service: "sqs", Secret: func(context.Context, string) (string, error) {
				t.Error("a malformed Authorization reached the key lookup")
				return "", ErrUnknownKey
			}}
			_, err := v.Verify(r, body, signedAt)
			e := requireCode(t, err, c.code)
			require.NotContains(t, e.Message, "\x00")
		})
	}
}

func manyHeaderNames(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "h" + strings.Repeat("a", i+1)
	}
	names[n-1] = "host"
	return strings.Join(names, ";")
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
