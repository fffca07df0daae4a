package sigv4

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

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
