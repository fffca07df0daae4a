package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/sigv4"
	"github.com/ferry-mq/ferry/internal/sqsmd5"
	"github.com/ferry-mq/ferry/store"
)

type receiveMessageInput struct {
	QueueUrl                    string   `json:"QueueUrl"`                             //nolint:revive // SQS's member name
	AttributeNames              []string `json:"AttributeNames" query:"AttributeName"` //nolint:revive // SQS's member name
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames" query:"MessageSystemAttributeName"`
	MessageAttributeNames       []string `json:"MessageAttributeNames" query:"MessageAttributeName"`
	MaxNumberOfMessages         *int     `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int     `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int     `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptId     string   `json:"ReceiveRequestAttemptId"` //nolint:revive // SQS's member name
}

type messageOutput struct {
	MessageId              string     `json:"MessageId"`     //nolint:revive // SQS's member name
	ReceiptHandle          string     `json:"ReceiptHandle"` //nolint:revive // SQS's member name
	MD5OfBody              string     `json:"MD5OfBody"`
	Body                   string     `json:"Body"`
	Attributes             attrMap    `json:"Attributes,omitempty" xml:"Attribute,omitempty"`
	MD5OfMessageAttributes string     `json:"MD5OfMessageAttributes,omitempty" xml:",omitempty"`
	MessageAttributes      msgAttrMap `json:"MessageAttributes,omitempty" xml:"MessageAttribute,omitempty"`
}

type receiveMessageOutput struct {
	Messages []messageOutput `json:"Messages,omitempty" xml:"Message"`
}

func (f *face) receiveMessage(cl *call) (any, error) {
	var in receiveMessageInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	maxN, wait := deref(in.MaxNumberOfMessages, 1), deref(in.WaitTimeSeconds, 0)
	switch {
	case maxN < 1 || maxN > 10:
		return nil, invalidParam("MaxNumberOfMessages", "Must be between 1 and 10, if provided")
	case wait < 0 || wait > 20:
		return nil, invalidParam("WaitTimeSeconds", "Must be >= 0 and <= 20, if provided")
	case in.VisibilityTimeout != nil && (*in.VisibilityTimeout < 0 || *in.VisibilityTimeout > 43200):
		return nil, invalidParam("VisibilityTimeout", "Must be >= 0 and <= 43200, if provided")
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Receive, true)
	if err != nil {
		return nil, err
	}
	if in.WaitTimeSeconds == nil {
		wait = q.ReceiveWaitSeconds // the queue's ReceiveMessageWaitTimeSeconds
	}
	p := store.ReceiveParams{
		ClaimParams: store.ClaimParams{
			Queue: q, Max: maxN,
			// 0: received, and visible again at once (as SQS).
			VisibilityTimeout: time.Duration(deref(in.VisibilityTimeout, q.VisibilityTimeoutSeconds)) * time.Second,
		},
		Wait: time.Duration(wait) * time.Second, FallbackPoll: f.FallbackPoll, Stop: f.Stop,
		Recheck: f.recheck(cl, q.Name),
	}
	msgs, dead, err := store.MessageReceive(cl.ctx, f.Pool, f.Notifier, p)
	if err != nil {
		return nil, err
	}
	if f.Metrics != nil {
		f.Metrics.ObserveDeadLettered(q.Name, dead)
		f.Metrics.ObserveReceived(q.Name, len(msgs))
	}
	system := slices.Concat(in.AttributeNames, in.MessageSystemAttributeNames)
	out := receiveMessageOutput{Messages: make([]messageOutput, len(msgs))}
	for i, m := range msgs {
		out.Messages[i] = toMessageOutput(q.Name, m, system, in.MessageAttributeNames)
	}
	return out, nil
}

// recheck is what a long poll calls after each wait: the request's key is
// looked up again, so that a key revoked while the poll waits gets the
// error a new request would, and nothing is claimed for it.
func (f *face) recheck(cl *call, queue string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, key, err := f.Keys(ctx, cl.keyID)
		switch {
		case errors.Is(err, sigv4.ErrUnknownKey) || (err == nil && key.Expired(time.Now())):
			return failWith(http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid.")
		case err != nil:
			return err
		}
		cl.key = key
		return cl.permit(queue, access.Receive)
	}
}

// toMessageOutput is m as ReceiveMessage answers it, with the system
// attributes and message attributes asked for.
func toMessageOutput(queue string, m store.Message, system, names []string) messageOutput {
	body := sqsBody(m.Body)
	attrs, trace := fromRESTAttributes(m.Attributes)
	attrs = selectAttributes(attrs, names)
	out := messageOutput{
		MessageId:     store.FormatMessageID(m.ID),
		ReceiptHandle: m.Receipt.String(),
		MD5OfBody:     sqsmd5.Body(body),
		Body:          body,
		Attributes:    systemAttributes(queue, m, trace, system),
	}
	if len(attrs) > 0 {
		out.MessageAttributes, out.MD5OfMessageAttributes = attrs, md5OfAttributes(attrs)
	}
	return out
}

// sqsBody is a stored body as SQS readers see it: a JSON string's text,
// any other JSON value's compact text.
func sqsBody(raw json.RawMessage) string { return handlers.BodyText(raw) }

// systemAttributes is the message's system attributes that names asks
// for ("All": every one Ferry has).
func systemAttributes(queue string, m store.Message, trace *string, names []string) attrMap {
	all := attrMap{
		"SentTimestamp":           strconv.FormatInt(m.SentAt.UnixMilli(), 10),
		"ApproximateReceiveCount": strconv.Itoa(m.ReceiveCount),
	}
	if m.Group != nil {
		all["MessageGroupId"] = *m.Group
	}
	if m.DedupID != nil {
		all["MessageDeduplicationId"] = *m.DedupID
	}
	if isFifo(queue) {
		all["SequenceNumber"] = sequenceNumber(m.ID)
	}
	if trace != nil {
		all["AWSTraceHeader"] = *trace
	}
	out := attrMap{}
	for _, n := range names {
		if n == "All" {
			return all
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return out
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
