package store_test

import (
	"encoding/base64"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// TestParseReceiptStrict: only the exact string Receipt.String made is a
// receipt; other spellings of the same bytes, which a lax base64 decoder
// takes, are not.
func TestParseReceiptStrict(t *testing.T) {
	t.Parallel()
	for _, r := range []store.Receipt{{MessageID: 1, Token: 1}, {MessageID: 123456789, Token: -42}, {MessageID: math.MaxInt64, Token: math.MinInt64}} {
		s := r.String()
		got, err := store.ParseReceipt(s)
		require.NoError(t, err)
		require.Equal(t, r, got)

		// The last character carries 2 bits and 4 unused ones: its
		// neighbour decodes to the same bytes when decoding is lax.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := alphabet[indexByte(alphabet, s[len(s)-1])^1]
		tampered := s[:len(s)-1] + string(last)
		lax, err := base64.RawURLEncoding.DecodeString(tampered)
		require.NoError(t, err)
		exact, _ := base64.RawURLEncoding.DecodeString(s)
		require.Equal(t, exact, lax, "the lax decoder reads the same receipt")

		for _, forged := range []string{tampered, s[:3] + "\n" + s[3:], s + "\r\n", s + "=", s + "==", base64.URLEncoding.EncodeToString(exact),
			base64.StdEncoding.EncodeToString(exact), s[:len(s)-1], s + "A", ""} {
			_, err := store.ParseReceipt(forged)
			require.Error(t, err, "%q is not a receipt Ferry issued", forged)
		}
	}
}

func indexByte(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func TestParseMessageIDStrict(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 42, math.MaxInt64} {
		got, ok := store.ParseMessageID(store.FormatMessageID(id))
		require.True(t, ok)
		require.Equal(t, id, got)
	}
	for _, s := range []string{"+42", "042", " 42", "42 ", "0", "-1", "", "4_2", "0x2a", "9223372036854775808"} {
		_, ok := store.ParseMessageID(s)
		require.False(t, ok, "%q", s)
	}
}
