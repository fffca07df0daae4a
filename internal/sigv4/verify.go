package sigv4

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// MaxSkew is how far X-Amz-Date may be from the server's clock, either way.
const MaxSkew = 15 * time.Minute

// unsignedPayload is the payload hash S3 accepts in place of the body's; see
// the package documentation for why Verify refuses it.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// SecretFunc returns the secret access key of an access key id, or
// [ErrUnknownKey] when there is no such key (or it was revoked). Any other
// error is the server's own and is returned by Verify as it is, wrapped. An
// empty secret counts as no key: nobody signs with one.
type SecretFunc func(ctx context.Context, accessKeyID string) (secret string, err error)

// Verifier checks the SigV4 signature of requests made to one service.
type Verifier struct {
	// Service is the service the credential scope must name ("sqs").
	Service string
	// Secret looks up secret access keys. It is called once per request,
	// after the cheap checks (shape, scope, time) passed.
	Secret SecretFunc
}

// Signed is what a verified request was signed with.
type Signed struct {
	AccessKeyID string
	// Region is the credential scope's region, any name the client was
	// configured with ("us-east-1", "local").
	Region string
	// Time is the request's X-Amz-Date.
	Time time.Time
	// Presigned is true for query-string authentication.
	Presigned bool
}

// Verify checks r's signature, header or presigned, against body (the whole
// request body, already read) at time now. It returns what the request was
// signed with, an [*Error] to answer the client with, or another error when
// the secret lookup failed.
func (v *Verifier) Verify(r *http.Request, body []byte, now time.Time) (Signed, error) {
	query, qerr := parseQuery(r.URL.RawQuery)
	a, err := parseAuth(r, query)
	if err != nil {
		return Signed{}, err
	}
	if qerr != nil {
		return Signed{}, qerr
	}
	s, err := checkCredential(a, v.Service)
	if err != nil {
		return Signed{}, err
	}
	if err := checkTime(a.amzDate, s, now); err != nil {
		return Signed{}, err
	}
	signed, err := parseSignedHeaders(a.signedHeaders)
	if err != nil {
		return Signed{}, err
	}
	want, err := parseSignature(a.signature)
	if err != nil {
		return Signed{}, err
	}
	secret, err := v.Secret(r.Context(), s.accessKeyID)
	if errors.Is(err, ErrUnknownKey) || (err == nil && secret == "") {
		return Signed{}, newError(InvalidClientTokenId, msgBadKey)
	} else if err != nil {
		return Signed{}, fmt.Errorf("sigv4: look up access key id: %w", err)
	}
	payloadHash, err := checkPayload(r, body)
	if err != nil {
		return Signed{}, err
	}
	canonical, err := canonicalRequest(r, query, a.presigned, signed, payloadHash)
	if err != nil {
		return Signed{}, err
	}
	toSign := stringToSign(a.amzDate, s, canonical)
	if !hmac.Equal(hmacSHA256(signingKey(secret, s), toSign), want) {
		return Signed{}, &Error{Code: SignatureDoesNotMatch, Message: msgSignature, CanonicalRequest: canonical, StringToSign: toSign}
	}
	return Signed{AccessKeyID: s.accessKeyID, Region: s.region, Time: s.date, Presigned: a.presigned}, nil
}

// parseQuery parses the raw query within bounds; a query that does not
// parse is refused, never half-signed (url.Values would drop the bad pair).
func parseQuery(raw string) (url.Values, error) {
	if len(raw) > maxQueryLen {
		return url.Values{}, mismatch("The query string is longer than %d bytes.", maxQueryLen)
	}
	if n := countParams(raw); n > maxQueryParams {
		return url.Values{}, mismatch("The query string has more than %d parameters.", maxQueryParams)
	}
	query, err := url.ParseQuery(raw)
	if err != nil {
		return query, mismatch("The query string is not valid URL encoding.")
	}
	return query, nil
}

func countParams(raw string) int {
	n := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] == '&' {
			n++
		}
	}
	return n + 1
}

// checkTime refuses a request signed more than MaxSkew away from now (a
// replay, or a client clock that is off), and a presigned request past its
// X-Amz-Expires, in SQS's words.
func checkTime(amzDate string, s scope, now time.Time) error {
	now = now.UTC()
	expired := func(format string, args ...any) error {
		e := mismatch(format, args...)
		e.Expired = true
		return e
	}
	if earliest := now.Add(-MaxSkew); s.date.Before(earliest) {
		return expired("Signature expired: %s is now earlier than %s (%s - 15 min.)", amzDate, earliest.Format(timeFormat), now.Format(timeFormat))
	}
	if latest := now.Add(MaxSkew); s.date.After(latest) {
		return expired("Signature not yet current: %s is still later than %s (%s + 15 min.)", amzDate, latest.Format(timeFormat), now.Format(timeFormat))
	}
	if s.expires > 0 && now.After(s.date.Add(s.expires)) {
		return expired("Request has expired: X-Amz-Date %s plus X-Amz-Expires %d s is earlier than %s.", amzDate, int(s.expires/time.Second), now.Format(timeFormat))
	}
	return nil
}

// parseSignature decodes the claimed signature: 64 lowercase hex digits.
func parseSignature(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != s {
		return nil, newError(SignatureDoesNotMatch, msgSignature)
	}
	return b, nil
}

// checkPayload returns the hash the canonical request ends with: always the
// SHA-256 of the body, which X-Amz-Content-Sha256 must equal when present.
func checkPayload(r *http.Request, body []byte) (string, error) {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	claimed := r.Header.Values("X-Amz-Content-Sha256")
	switch {
	case len(claimed) == 0:
		return hash, nil
	case len(claimed) > 1:
		return "", mismatch("Only one 'x-amz-content-sha256' header is allowed.")
	case claimed[0] == unsignedPayload:
		return "", mismatch("'x-amz-content-sha256' may not be '%s' for this service: the body must be signed.", unsignedPayload)
	case claimed[0] != hash:
		return "", mismatch("The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return hash, nil
}
