package push_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
)

// The Standard Webhooks test vector, as published with the specification's
// reference libraries (and Svix's).
const (
	vecSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTimestamp = 1614265330
	vecBody      = `{"test": 2432232314}`
	vecSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// signed returns the headers WebhookHeaders sets for one delivery.
func signed(secrets []string, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	push.WebhookHeaders(h, secrets, id, ts, body)
	return h
}

func TestSignOfficialVector(t *testing.T) {
	t.Parallel()
	ts := time.Unix(vecTimestamp, 0)
	require.Equal(t, vecSignature, push.Sign([]string{vecSecret}, vecID, ts, []byte(vecBody)))

	// The same vector verifies, as received from any sender.
	h := http.Header{}
	h.Set("webhook-id", vecID)
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", vecSignature)
	require.NoError(t, push.Verify(vecSecret, h, []byte(vecBody), ts, 0))
}

func TestWebhookHeaders(t *testing.T) {
	t.Parallel()
	ts := time.Unix(vecTimestamp, 999_000_000) // sub-second part is dropped
	h := signed([]string{vecSecret}, vecID, ts, []byte(vecBody))
	require.Equal(t, vecID, h.Get("Webhook-Id"))
	require.Equal(t, "1614265330", h.Get("Webhook-Timestamp"))
	require.Equal(t, vecSignature, h.Get("Webhook-Signature"))
	require.Len(t, h, 3)
}

func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	secret := push.NewSigningSecret()
	now := time.Now()
	body := []byte(`{"id":"evt_1","data":{"n":1}}`)
	h := signed([]string{secret}, "evt_1", now, body)
	require.NoError(t, push.Verify(secret, h, body, now, 0))
	require.NoError(t, push.Verify(secret, h, body, now.Add(4*time.Minute), 0))

	// Another secret does not verify.
	err := push.Verify(push.NewSigningSecret(), h, body, now, 0)
	require.ErrorIs(t, err, push.ErrWebhookSignature)

	// Nor does a secret Verify cannot use.
	require.ErrorIs(t, push.Verify("not-a-secret", h, body, now, 0), push.ErrWebhookSecret)

	// An empty body is signed and verified like any other.
	h = signed([]string{secret}, "evt_2", now, nil)
	require.NoError(t, push.Verify(secret, h, []byte{}, now, 0))
}

func TestSignTwoSecretsDuringRotation(t *testing.T) {
	t.Parallel()
	current, previous := push.NewSigningSecret(), push.NewSigningSecret()
	now := time.Now()
	body := []byte(`{"n":2}`)
	h := signed([]string{current, previous}, "msg_1", now, body)

	sigs := strings.Split(h.Get("webhook-signature"), " ")
	require.Len(t, sigs, 2)
	require.Equal(t, push.Sign([]string{current}, "msg_1", now, body), sigs[0], "current secret first")
	require.Equal(t, push.Sign([]string{previous}, "msg_1", now, body), sigs[1])
	for _, s := range sigs {
		require.True(t, strings.HasPrefix(s, "v1,"), s)
	}

	require.NoError(t, push.Verify(current, h, body, now, 0))
	require.NoError(t, push.Verify(previous, h, body, now, 0))
	require.ErrorIs(t, push.Verify(push.NewSigningSecret(), h, body, now, 0), push.ErrWebhookSignature)
}

func TestVerifyIgnoresOtherVersionsAndJunk(t *testing.T) {
	t.Parallel()
	now := time.Unix(vecTimestamp, 0)
	h := http.Header{}
	h.Set("webhook-id", vecID)
	h.Set("webhook-timestamp", "1614265330")

	// A future signature version carrying the right bytes is not a v1 match.
	h.Set("webhook-signature", "v1a,"+strings.TrimPrefix(vecSignature, "v1,"))
	require.ErrorIs(t, push.Verify(vecSecret, h, []byte(vecBody), now, 0), push.ErrWebhookSignature)

	// Junk and wrong signatures around the right one do not hide it.
	h.Set("webhook-signature", "junk v1,bm9wZQ== v2,abc  "+vecSignature+" v1,")
	require.NoError(t, push.Verify(vecSecret, h, []byte(vecBody), now, 0))
}

func TestVerifyTampered(t *testing.T) {
	t.Parallel()
	secret := push.NewSigningSecret()
	now := time.Now()
	body := []byte(`{"amount":100}`)

	h := signed([]string{secret}, "msg_1", now, body)
	require.ErrorIs(t, push.Verify(secret, h, []byte(`{"amount":900}`), now, 0), push.ErrWebhookSignature, "body")

	h = signed([]string{secret}, "msg_1", now, body)
	h.Set("webhook-id", "msg_2")
	require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookSignature, "id")

	h = signed([]string{secret}, "msg_1", now, body)
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))
	require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookSignature, "timestamp")

	h = signed([]string{secret}, "msg_1", now, body)
	sig := h.Get("webhook-signature")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1,"))
	require.NoError(t, err)
	raw[0] ^= 1
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(raw))
	require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookSignature, "signature")
}

func TestVerifyMissingOrMalformedHeaders(t *testing.T) {
	t.Parallel()
	secret := push.NewSigningSecret()
	now := time.Now()
	body := []byte(`{}`)
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		h := signed([]string{secret}, "msg_1", now, body)
		h.Del(name)
		require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookHeaders, name)
	}
	for _, ts := range []string{"soon", "1614265330.5", "1e9"} {
		h := signed([]string{secret}, "msg_1", now, body)
		h.Set("webhook-timestamp", ts)
		require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookHeaders, ts)
	}
}

func TestVerifyTimestampTolerance(t *testing.T) {
	t.Parallel()
	secret := push.NewSigningSecret()
	now := time.Now()
	body := []byte(`{}`)

	old := signed([]string{secret}, "msg_1", now.Add(-6*time.Minute), body)
	require.ErrorIs(t, push.Verify(secret, old, body, now, 0), push.ErrWebhookTimestamp, "6 min old")

	future := signed([]string{secret}, "msg_1", now.Add(6*time.Minute), body)
	require.ErrorIs(t, push.Verify(secret, future, body, now, 0), push.ErrWebhookTimestamp, "6 min ahead")

	// Within the default 5 minutes either way it passes.
	require.NoError(t, push.Verify(secret, signed([]string{secret}, "msg_1", now.Add(-4*time.Minute), body), body, now, 0))
	require.NoError(t, push.Verify(secret, signed([]string{secret}, "msg_1", now.Add(4*time.Minute), body), body, now, 0))

	// An explicit tolerance replaces the default.
	require.NoError(t, push.Verify(secret, old, body, now, 10*time.Minute))
	require.ErrorIs(t, push.Verify(secret, signed([]string{secret}, "msg_1", now.Add(-2*time.Minute), body), body, now, time.Minute),
		push.ErrWebhookTimestamp)

	// A stale timestamp is refused even with a valid signature over it, and
	// absurd values do not overflow into acceptance.
	for _, ts := range []string{"0", "-9223372036854775808", "9223372036854775807"} {
		h := http.Header{}
		h.Set("webhook-id", "msg_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", "v1,AAAA")
		require.ErrorIs(t, push.Verify(secret, h, body, now, 0), push.ErrWebhookTimestamp, ts)
	}
}

func TestSignSkipsMalformedSecrets(t *testing.T) {
	t.Parallel()
	ts := time.Unix(vecTimestamp, 0)
	body := []byte(vecBody)
	got := push.Sign([]string{"", "whsec_", "garbage", vecSecret, "whsec_c2hvcnQ="}, vecID, ts, body)
	require.Equal(t, vecSignature, got, "only the valid secret signs")

	require.NotPanics(t, func() {
		require.Equal(t, "", push.Sign([]string{"whsec_%%%", "nope"}, vecID, ts, body))
		require.Equal(t, "", push.Sign(nil, vecID, ts, body))
	})
}
