package sigv4

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is the error code AWS answers for a refused signature, the word an SDK
// turns into its exception type (Query protocol `<Code>`, the
// `x-amzn-query-error` header in AWS JSON 1.0).
type Code string

// The codes [Verifier.Verify] returns, as SQS uses them.
const (
	// MissingAuthenticationToken: neither an Authorization header nor
	// presigned query parameters.
	MissingAuthenticationToken Code = "MissingAuthenticationToken"
	// IncompleteSignature: an authentication attempt that lacks a part AWS
	// requires (Credential, SignedHeaders, Signature, X-Amz-Date) or is not
	// shaped like SigV4 at all.
	IncompleteSignature Code = "IncompleteSignature"
	// InvalidClientTokenId: the access key id is unknown (or revoked).
	InvalidClientTokenId Code = "InvalidClientTokenId"
	// SignatureDoesNotMatch: every other refusal — wrong signature, a
	// credential scope for another service or day, a time outside the
	// allowed skew (see [Error.Expired]), a payload hash that is not the
	// body's.
	SignatureDoesNotMatch Code = "SignatureDoesNotMatch"
)

// ErrUnknownKey is what a [SecretFunc] returns for an access key id it does
// not know (never made, revoked, expired); Verify answers it with
// [InvalidClientTokenId].
var ErrUnknownKey = errors.New("sigv4: unknown access key id")

// Error is a refused signature: a client fault, to be answered with Code and
// Message in the protocol's error shape. Any other error from Verify is the
// server's own (a failed key lookup) and is no client's fault.
type Error struct {
	Code    Code
	Message string

	// Expired is true when the request's time is the only fault: its
	// X-Amz-Date is more than 15 minutes from the server's clock, or a
	// presigned request is past its X-Amz-Expires. Code is then
	// SignatureDoesNotMatch, as SQS answers it ("Signature expired: …");
	// see the package documentation for why not RequestExpired.
	Expired bool

	// CanonicalRequest and StringToSign are what the server computed, set
	// when the signature itself did not match. They hold nothing secret; AWS
	// prints both in its SignatureDoesNotMatch message, and they are the
	// first thing to compare with a client's debug log.
	CanonicalRequest string
	StringToSign     string
}

func (e *Error) Error() string { return "sigv4: " + string(e.Code) + ": " + e.Message }

// HTTPStatus is the status SQS answers the code with: 400 for
// IncompleteSignature, 403 for the others.
func (e *Error) HTTPStatus() int {
	if e.Code == IncompleteSignature {
		return http.StatusBadRequest
	}
	return http.StatusForbidden
}

// Messages worded as AWS words them, so that a client's log reads the same
// against Ferry as against SQS.
const (
	msgMissing   = "Request is missing Authentication Token"
	msgBadKey    = "The security token included in the request is invalid."
	msgSignature = "The request signature we calculated does not match the signature you provided. " +
		"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	msgIncomplete = "The request signature does not conform to AWS standards."
)

func newError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func incomplete(format string, args ...any) *Error {
	return newError(IncompleteSignature, format, args...)
}

func mismatch(format string, args ...any) *Error {
	return newError(SignatureDoesNotMatch, format, args...)
}
