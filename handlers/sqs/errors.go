package sqs

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/store"
)

// apiError is an answer in SQS's error shape: Code is the Query protocol's
// code (and the x-amzn-query-error header's), Shape the name of the error
// shape the JSON protocol's __type names (com.amazonaws.sqs#<Shape>), which
// aws-sdk-go-v2 and the other SDKs turn into their typed errors.
type apiError struct {
	Status  int
	Code    string
	Shape   string
	Message string
	// Sender is true for a client's fault (Type Sender), false for the
	// server's (Receiver).
	Sender bool
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// The error codes Ferry answers, by the shape SQS's model gives them
// (shapeless codes are their own shape).
const (
	codeNonExistentQueue = "AWS.SimpleQueueService.NonExistentQueue"
	codeQueueExists      = "QueueAlreadyExists"
	codeInvalidParameter = "InvalidParameterValue"
	codeMissingParameter = "MissingParameter"
	codeInvalidAction    = "InvalidAction"
	codeInvalidAttrName  = "InvalidAttributeName"
	codeInvalidAttrValue = "InvalidAttributeValue"
	codeInvalidContents  = "InvalidMessageContents"
	codeInvalidAddress   = "InvalidAddress"
	codeReceiptInvalid   = "ReceiptHandleIsInvalid"
	codeNotInflight      = "AWS.SimpleQueueService.MessageNotInflight"
	codeIdsNotDistinct   = "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
	codeTooManyEntries   = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
	codeEmptyBatch       = "AWS.SimpleQueueService.EmptyBatchRequest"
	codeBatchTooLong     = "AWS.SimpleQueueService.BatchRequestTooLong"
	codeInvalidBatchID   = "AWS.SimpleQueueService.InvalidBatchEntryId"
	codeUnsupported      = "AWS.SimpleQueueService.UnsupportedOperation"
	codeThrottled        = "RequestThrottled"
	codeAccessDenied     = "AccessDenied"
	codeMalformedQuery   = "MalformedQueryString"
	codeSerialization    = "SerializationException"
	codeUnavailable      = "ServiceUnavailable"
	codeInternal         = "InternalError"
	codeUnknownOperation = "UnknownOperationException"
)

// shapes names the error shapes of SQS's model whose Query code differs
// from the shape's name (see apiError).
var shapes = map[string]string{ //nolint:gochecknoglobals // a read-only table
	codeNonExistentQueue: "QueueDoesNotExist",
	codeQueueExists:      "QueueNameExists",
	codeNotInflight:      "MessageNotInflight",
	codeIdsNotDistinct:   "BatchEntryIdsNotDistinct",
	codeTooManyEntries:   "TooManyEntriesInBatchRequest",
	codeEmptyBatch:       "EmptyBatchRequest",
	codeBatchTooLong:     "BatchRequestTooLong",
	codeInvalidBatchID:   "InvalidBatchEntryId",
	codeUnsupported:      "UnsupportedOperation",
}

// fail is a client's fault: HTTP 400 with code, the message formatted.
func fail(code, format string, args ...any) *apiError {
	return failWith(http.StatusBadRequest, code, format, args...)
}

// failWith is a client's fault with another status.
func failWith(status int, code, format string, args ...any) *apiError {
	shape := shapes[code]
	if shape == "" {
		shape = code
	}
	return &apiError{Status: status, Code: code, Shape: shape, Message: fmt.Sprintf(format, args...), Sender: true}
}

// invalidParam is SQS's InvalidParameterValue for one parameter.
func invalidParam(param, reason string) *apiError {
	return fail(codeInvalidParameter, "Value for parameter %s is invalid. Reason: %s", param, reason)
}

// missingParam is SQS's MissingParameter.
func missingParam(param string) *apiError {
	return fail(codeMissingParameter, "The request must contain the parameter %s.", param)
}

// noQueue is the answer for a queue that does not exist.
func noQueue() *apiError {
	return fail(codeNonExistentQueue, "The specified queue does not exist.")
}

// toAPIError is err as the client is answered: an [*apiError] as it is;
// a signature's refusal with its code; the store's and the REST rules'
// errors as SQS words them; anything else a 500 InternalError (the
// caller logs the cause, which the client never sees).
func toAPIError(err error) (e *apiError, internal bool) {
	var (
		ae   *apiError
		se   *sigv4.Error
		verr *store.ValidationError
		full *store.QueueFullError
		p    *handlers.Problem
	)
	switch {
	case errors.As(err, &ae):
		return ae, false
	case errors.As(err, &se):
		return failWith(se.HTTPStatus(), string(se.Code), "%s", se.Message), false
	case errors.As(err, &verr):
		return fail(codeInvalidParameter, "Value for parameter %s is invalid. Reason: %s", verr.Field, verr.Message), false
	case errors.As(err, &full):
		return fail(codeThrottled, "The queue holds %d of at most %d messages (max_depth); retry later.", full.Depth, full.MaxDepth), false
	case errors.As(err, &p) && p.Status < 500:
		return fail(codeInvalidParameter, "%s", p.Detail), false
	case errors.Is(err, store.ErrNotFound):
		return noQueue(), false
	case errors.Is(err, store.ErrBusy), store.IsUnavailable(err), errors.Is(err, store.ErrShuttingDown):
		e := failWith(http.StatusServiceUnavailable, codeUnavailable, "The service is unavailable; retry.")
		e.Sender = false
		return e, false
	}
	e = failWith(http.StatusInternalServerError, codeInternal, "internal error; see the server log for this request id")
	e.Sender = false
	return e, true
}
