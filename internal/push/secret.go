package push

// Signing secrets: "whsec_" + base64 of a random key, one per push target,
// made here on creation and on rotation; [Sign] and [Verify] take them.

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

const (
	// secretPrefix starts every signing secret, as in the Standard Webhooks
	// and Svix formats.
	secretPrefix = "whsec_"
	// secretKeyBytes is the key length [NewSigningSecret] generates: 256
	// bits, the output size of SHA-256.
	secretKeyBytes = 32
	// minSecretKeyBytes is the shortest key [ValidSigningSecret] accepts: the
	// Standard Webhooks specification's lower bound (24 bytes, 192 bits).
	minSecretKeyBytes = 24
)

// NewSigningSecret returns a fresh secret: "whsec_" + base64 (standard
// encoding) of 32 random bytes from crypto/rand: the way to make every
// signing secret Ferry hands out, on creation and on rotation.
func NewSigningSecret() string {
	key := make([]byte, secretKeyBytes)
	// crypto/rand.Read never returns an error (it crashes the program
	// irrecoverably instead, since Go 1.24), so there is nothing to handle.
	_, _ = rand.Read(key)
	return secretPrefix + base64.StdEncoding.EncodeToString(key)
}

// ValidSigningSecret reports whether s is a whsec_ secret whose key (the
// part after the prefix, standard base64 with padding) decodes to at least
// 24 bytes. It is the check to apply to any secret accepted from outside
// (configuration, an import) before storing it.
func ValidSigningSecret(s string) bool {
	_, ok := signingKey(s)
	return ok
}

// signingKey returns the HMAC key of secret s, or false when s is not a
// valid secret (see ValidSigningSecret).
func signingKey(s string) ([]byte, bool) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, false
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) < minSecretKeyBytes {
		return nil, false
	}
	return key, true
}
