package push

// Webhook signing in the Standard Webhooks format
// (https://www.standardwebhooks.com/). Every push Ferry makes carries three
// headers:
//
//	webhook-id:        the event or message id, the same on every retry
//	webhook-timestamp: unix seconds when this attempt was signed
//	webhook-signature: "v1,<sig>" per secret, space-separated
//
// where <sig> is base64 (standard alphabet, padded) of
// HMAC-SHA256(key, id + "." + timestamp + "." + body) and key is the
// base64-decoded part of a "whsec_..." secret. Following the format exactly
// (not a look-alike) is the point: receivers can verify Ferry's pushes with
// any Standard Webhooks or Svix library, and TestSignOfficialVector pins the
// published test vector so a change here cannot drift from it unnoticed.
//
// During a secret rotation a push is signed with both the new and the
// previous secret, so a receiver still configured with either accepts it.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the Standard Webhooks format. net/http canonicalises them
// on the wire (Webhook-Id, ...); receivers must match them
// case-insensitively, as HTTP requires.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

const (
	// signatureVersion prefixes each symmetric (HMAC-SHA256) signature.
	// Other versions in a received header (e.g. asymmetric "v1a") are
	// ignored by Verify, as the specification asks.
	signatureVersion = "v1"
	// DefaultWebhookTolerance is how far a webhook-timestamp may be from the
	// receiver's clock, either way, before Verify refuses it: it bounds
	// replays of captured requests while allowing for clock skew.
	DefaultWebhookTolerance = 5 * time.Minute
)

// Errors returned by Verify (wrapped with detail; test with errors.Is).
var (
	// ErrWebhookSecret: the secret given to Verify is not a valid whsec_
	// secret. A configuration error on the receiver's side.
	ErrWebhookSecret = errors.New("webhook: invalid signing secret")
	// ErrWebhookHeaders: webhook-id, webhook-timestamp or
	// webhook-signature is missing or malformed.
	ErrWebhookHeaders = errors.New("webhook: missing or malformed headers")
	// ErrWebhookTimestamp: webhook-timestamp is outside the tolerance (too
	// old, or in the future).
	ErrWebhookTimestamp = errors.New("webhook: timestamp outside tolerance")
	// ErrWebhookSignature: no v1 signature in webhook-signature matches.
	ErrWebhookSignature = errors.New("webhook: no matching signature")
)

// sign returns the base64 HMAC-SHA256 of "{id}.{ts}.{body}" under key, ts
// being the decimal unix seconds exactly as sent in webhook-timestamp.
func sign(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign returns the webhook-signature header value for the given secrets:
// one "v1,<base64 HMAC-SHA256>" per secret, space-separated, in the order
// given (current first, then the previous one during a rotation). The
// signed content is "{id}.{unix seconds of timestamp}.{body}", body being
// exactly the bytes sent.
//
// It never panics: a malformed secret (see [ValidSigningSecret]) is skipped,
// and with no valid secret at all the result is "". Callers only pass
// secrets made by [NewSigningSecret], so neither should happen; a receiver
// would refuse such a push, which is the safe failure.
func Sign(secrets []string, id string, timestamp time.Time, body []byte) string {
	ts := strconv.FormatInt(timestamp.Unix(), 10)
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, ok := signingKey(s)
		if !ok {
			continue
		}
		sigs = append(sigs, signatureVersion+","+sign(key, id, ts, body))
	}
	return strings.Join(sigs, " ")
}

// WebhookHeaders sets webhook-id, webhook-timestamp (unix seconds) and
// webhook-signature (see [Sign]) on h, replacing any values already there.
// Call it once per delivery attempt with the attempt's own timestamp: id
// stays the same across retries (receivers dedupe on it), the timestamp and
// so the signature do not (receivers refuse stale timestamps).
func WebhookHeaders(h http.Header, secrets []string, id string, timestamp time.Time, body []byte) {
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(timestamp.Unix(), 10))
	h.Set(HeaderWebhookSignature, Sign(secrets, id, timestamp, body))
}

// Verify checks a received request the way a receiver should: the
// webhook-timestamp within tolerance of now, either way (tolerance <= 0
// means [DefaultWebhookTolerance], 5 minutes), and at least one v1 signature
// in webhook-signature equal (in constant time, hmac.Equal) to the one
// secret computes over the headers' id and timestamp and body, which must be
// the raw bytes received, before any JSON decoding. Signatures of other
// versions are ignored.
//
// It returns nil, or an error saying what failed, wrapping one of
// [ErrWebhookSecret], [ErrWebhookHeaders], [ErrWebhookTimestamp] or
// [ErrWebhookSignature]. Ferry's own tests use it; it is also the reference
// for users writing a receiver in Go (examples/verify-webhook-go is the
// same logic without this module).
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, ok := signingKey(secret)
	if !ok {
		return ErrWebhookSecret
	}
	id := h.Get(HeaderWebhookID)
	ts := h.Get(HeaderWebhookTimestamp)
	sigHeader := h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigHeader == "" {
		return fmt.Errorf("%w: need %s, %s and %s", ErrWebhookHeaders,
			HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrWebhookHeaders, HeaderWebhookTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	// Compare in seconds: no time.Duration overflow for absurd timestamps.
	tol := int64(tolerance / time.Second)
	switch nowSec := now.Unix(); {
	case sec < nowSec-tol:
		return fmt.Errorf("%w: %s is %ds old (tolerance %s)", ErrWebhookTimestamp, HeaderWebhookTimestamp, nowSec-sec, tolerance)
	case sec > nowSec+tol:
		return fmt.Errorf("%w: %s is %ds in the future (tolerance %s)", ErrWebhookTimestamp, HeaderWebhookTimestamp, sec-nowSec, tolerance)
	}
	want := []byte(sign(key, id, ts, body))
	for _, field := range strings.Fields(sigHeader) {
		version, sig, ok := strings.Cut(field, ",")
		if !ok || version != signatureVersion {
			continue
		}
		if hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return ErrWebhookSignature
}
