package push_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/push"
)

func TestNewSigningSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		s := push.NewSigningSecret()
		require.True(t, push.ValidSigningSecret(s), s)
		require.True(t, strings.HasPrefix(s, "whsec_"), s)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(key), 24)
		require.Len(t, key, 32)
		require.False(t, seen[s], "duplicate secret %s", s)
		seen[s] = true
	}
}

func TestValidSigningSecret(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	require.True(t, push.ValidSigningSecret(vecSecret), "official vector (24-byte key)")
	require.True(t, push.ValidSigningSecret("whsec_"+b64(24)))
	require.True(t, push.ValidSigningSecret("whsec_"+b64(64)))

	for name, s := range map[string]string{
		"empty":           "",
		"prefix only":     "whsec_",
		"23-byte key":     "whsec_" + b64(23),
		"16-byte key":     "whsec_" + b64(16),
		"bad base64":      "whsec_!!!!" + b64(30),
		"url alphabet":    "whsec_" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff, 0xfe}, 10)),
		"missing padding": "whsec_" + strings.TrimRight(b64(25), "="),
		"no prefix":       strings.TrimPrefix(vecSecret, "whsec_"),
		"other prefix":    "whsek_" + b64(32),
		"upper prefix":    "WHSEC_" + b64(32),
		"space inside":    "whsec_ " + b64(32),
	} {
		require.False(t, push.ValidSigningSecret(s), "%s: %q", name, s)
	}
}
