package sigv4

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorHTTPStatus: SQS answers an incomplete signature with 400 and
// every other refusal with 403; the error's text names its code.
func TestErrorHTTPStatus(t *testing.T) {
	t.Parallel()
	require.Equal(t, http.StatusBadRequest, incomplete("x %d", 1).HTTPStatus())
	for _, code := range []Code{SignatureDoesNotMatch, InvalidClientTokenId, MissingAuthenticationToken} {
		require.Equal(t, http.StatusForbidden, newError(code, "m").HTTPStatus(), code)
	}
	e := mismatch("the %s differs", "payload hash")
	require.Equal(t, SignatureDoesNotMatch, e.Code)
	require.Equal(t, "sigv4: SignatureDoesNotMatch: the payload hash differs", e.Error())
}
