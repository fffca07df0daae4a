package sqs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/internal/sqsmd5"
	"github.com/ferry-mq/ferry/store"
)

// messageFields are a message's members in SendMessage and in an entry of
// SendMessageBatch.
type messageFields struct {
	MessageBody             *string    `json:"MessageBody"`
	DelaySeconds            *int       `json:"DelaySeconds"`
	MessageAttributes       msgAttrMap `json:"MessageAttributes" query:"MessageAttribute"`
	MessageSystemAttributes msgAttrMap `json:"MessageSystemAttributes" query:"MessageSystemAttribute"`
	MessageDeduplicationId  *string    `json:"MessageDeduplicationId"` //nolint:revive // SQS's member name
	MessageGroupId          *string    `json:"MessageGroupId"`         //nolint:revive // SQS's member name
}

// sent is what SendMessage answers of a message beyond its id.
type sent struct {
	md5Body, md5Attrs, md5System string
}

// fifoIDRe is SQS's rule for a MessageGroupId or MessageDeduplicationId:
// 1-128 alphanumeric and punctuation characters.
var fifoIDRe = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]{1,128}$")

// toMessage checks one message for the queue q and converts it for the
// store; item names it in errors ("SendMessageBatchRequestEntry.2").
func (f *face) toMessage(q store.Queue, item string, m messageFields) (store.SendMessage, sent, error) {
	if m.MessageBody == nil || *m.MessageBody == "" {
		return store.SendMessage{}, sent{}, missingParam("MessageBody")
	}
	body := *m.MessageBody
	if !validBody(body) {
		return store.SendMessage{}, sent{}, fail(codeInvalidContents, "Invalid characters found in the message body.")
	}
	if limit := f.maxMessageSize(q); m.size() > limit {
		return store.SendMessage{}, sent{}, invalidParam("MessageBody",
			fmt.Sprintf("Message must be shorter than %d bytes (its body and attributes are %d).", limit, m.size()))
	}
	sm, err := fifoFields(q, body, m)
	if err != nil {
		return store.SendMessage{}, sent{}, err
	}
	if m.DelaySeconds != nil {
		if *m.DelaySeconds < 0 || *m.DelaySeconds > 900 {
			return store.SendMessage{}, sent{}, invalidParam("DelaySeconds", "must be from 0 to 900")
		}
		d := time.Duration(*m.DelaySeconds) * time.Second
		sm.Delay = &d
	}
	trace, err := checkAttributes(m)
	if err != nil {
		return store.SendMessage{}, sent{}, err
	}
	var enc bytes.Buffer
	je := json.NewEncoder(&enc)
	je.SetEscapeHTML(false)
	_ = je.Encode(body)
	sm.Body, sm.Attributes, err = f.storedLimits().CheckMessage(item, bytes.TrimSpace(enc.Bytes()), toRESTAttributes(m.MessageAttributes, trace))
	if err != nil {
		return store.SendMessage{}, sent{}, storedTooLarge(err)
	}
	return sm, sent{md5Body: sqsmd5.Body(body), md5Attrs: md5OfAttributes(m.MessageAttributes), md5System: md5OfTrace(trace)}, nil
}

// size is the message's size as SQS measures it against
// MaximumMessageSize and a batch's 256 KiB: its body's bytes and each
// message attribute's name, data type and value.
func (m messageFields) size() int {
	n := 0
	if m.MessageBody != nil {
		n += len(*m.MessageBody)
	}
	for name, a := range m.MessageAttributes {
		n += len(name) + len(a.DataType) + len(a.BinaryValue)
		if a.StringValue != nil {
			n += len(*a.StringValue)
		}
	}
	return n
}

// maxMessageSize is the queue's MaximumMessageSize: its max_message_size
// when it has one below the server's limit, else the server's limit
// (FERRY_MAX_BODY_BYTES), counted as SQS counts (messageFields.size).
func (f *face) maxMessageSize(q store.Queue) int {
	if q.MaxMessageSize > 0 && q.MaxMessageSize < f.Limits.MaxBodyBytes {
		return q.MaxMessageSize
	}
	return f.Limits.MaxBodyBytes
}

// storedLimits are the REST rules an SQS message's stored form is checked
// by: all but the size, which SQS's measure bounds (maxMessageSize), and
// a bound on the stored form itself, which is larger than SQS's measure:
// a body is a JSON string, its quotes and the escapes of '"', '\', tab,
// LF and CR (2 bytes each) and of U+2028 and U+2029 (6 bytes for 3) at
// most doubling it (SQS refuses every other control character, so none
// takes \u00XX); attributes gain their JSON encoding, a Binary value its
// base64 and sqs:types the data types. So the stored form may take twice
// the server's limit (FERRY_MAX_BODY_BYTES), and 64 KiB for attributes:
// every body SQS takes within MaximumMessageSize fits, and the database
// and memory hold at most about twice what a REST message may be. A
// message over it (a body of escapes with attributes of HTML characters,
// which Go's encoding writes as \u003c) is refused (InvalidParameterValue).
func (f *face) storedLimits() handlers.Limits {
	l := f.Limits
	l.MaxBodyBytes = 2*l.MaxBodyBytes + 64<<10
	return l
}

// storedTooLarge is err, the REST rules' refusal of a message's stored
// form, as the SQS face answers it: over the stored bound
// (storedLimits), an InvalidParameterValue that says so.
func storedTooLarge(err error) error {
	var p *handlers.Problem
	if errors.As(err, &p) && p.Status == http.StatusRequestEntityTooLarge {
		return invalidParam("MessageBody", "Message is too large as Ferry stores it (its body and attributes JSON-encoded): "+p.Detail+".")
	}
	return err
}

// fifoFields applies the FIFO members: on a FIFO queue MessageGroupId is
// required and becomes the group, MessageDeduplicationId the dedup_id
// (else, with content-based deduplication, the SHA-256 of the body; a
// FIFO queue without it refuses the message), and no message has its own
// delay; on a standard queue neither member is allowed, and a queue made
// over REST with content_based_dedup deduplicates by content too.
func fifoFields(q store.Queue, body string, m messageFields) (store.SendMessage, error) {
	var sm store.SendMessage
	if !isFifo(q.Name) {
		switch {
		case m.MessageGroupId != nil:
			return sm, invalidParam("MessageGroupId", "The request includes a parameter that is not valid for this queue type")
		case m.MessageDeduplicationId != nil:
			return sm, invalidParam("MessageDeduplicationId", "The request includes a parameter that is not valid for this queue type")
		case q.ContentBasedDedup:
			sm.DedupID = handlers.ContentDedupID(body)
		}
		return sm, nil
	}
	switch {
	case m.MessageGroupId == nil:
		return sm, missingParam("MessageGroupId")
	case !fifoIDRe.MatchString(*m.MessageGroupId):
		return sm, invalidParam("MessageGroupId", "must be 1 to 128 alphanumeric or punctuation characters")
	case m.MessageDeduplicationId != nil && !fifoIDRe.MatchString(*m.MessageDeduplicationId):
		return sm, invalidParam("MessageDeduplicationId", "must be 1 to 128 alphanumeric or punctuation characters")
	case m.DelaySeconds != nil:
		return sm, invalidParam("DelaySeconds", "The request includes a parameter that is not valid for this queue type")
	case m.MessageDeduplicationId == nil && !q.ContentBasedDedup:
		return sm, invalidParam("MessageDeduplicationId",
			"The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	sm.Group = *m.MessageGroupId
	if m.MessageDeduplicationId != nil {
		sm.DedupID = *m.MessageDeduplicationId
	} else {
		sm.DedupID = handlers.ContentDedupID(body)
	}
	return sm, nil
}

// checkAttributes checks the message's attributes and system attributes
// and returns its AWSTraceHeader, if any.
func checkAttributes(m messageFields) (*string, error) {
	if len(m.MessageAttributes) > maxMessageAttributes {
		return nil, invalidParam("MessageAttributes", "a message has at most 10 attributes")
	}
	for n, a := range m.MessageAttributes {
		if err := checkAttrName(n); err != nil {
			return nil, err
		}
		if err := checkAttr(n, a); err != nil {
			return nil, err
		}
	}
	var trace *string
	for n, a := range m.MessageSystemAttributes {
		if n != "AWSTraceHeader" {
			return nil, invalidParam("MessageSystemAttributes", "the only message system attribute is AWSTraceHeader")
		}
		if a.DataType != "String" || a.StringValue == nil || *a.StringValue == "" || !validBody(*a.StringValue) {
			return nil, invalidParam("MessageSystemAttributes", "AWSTraceHeader is a non-empty String")
		}
		trace = a.StringValue
	}
	return trace, nil
}

type sendMessageInput struct {
	QueueUrl string `json:"QueueUrl"` //nolint:revive // SQS's member name
	messageFields
}

type sendMessageOutput struct {
	MessageId                    string `json:"MessageId"` //nolint:revive // SQS's member name
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty" xml:",omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty" xml:",omitempty"`
	SequenceNumber               string `json:"SequenceNumber,omitempty" xml:",omitempty"`
}

// output is the answer for a message the store took as r.
func (s sent) output(queue string, r store.SendResult) sendMessageOutput {
	out := sendMessageOutput{MessageId: store.FormatMessageID(r.ID), MD5OfMessageBody: s.md5Body,
		MD5OfMessageAttributes: s.md5Attrs, MD5OfMessageSystemAttributes: s.md5System}
	if isFifo(queue) {
		out.SequenceNumber = sequenceNumber(r.ID)
	}
	return out
}

// sequenceNumber is a FIFO message's SequenceNumber: its id, which grows
// with the send order of the queue.
func sequenceNumber(id int64) string { return store.FormatMessageID(id) }

func (f *face) sendMessage(cl *call) (any, error) {
	var in sendMessageInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Send, true)
	if err != nil {
		return nil, err
	}
	msg, s, err := f.toMessage(q, "message", in.messageFields)
	if err != nil {
		return nil, err
	}
	results, err := f.send(cl, q.Name, []store.SendMessage{msg})
	if err != nil {
		return nil, err
	}
	return s.output(q.Name, results[0]), nil
}

// send writes msgs to the queue through the sender (group commit) and
// counts the new ones.
func (f *face) send(cl *call, queue string, msgs []store.SendMessage) ([]store.SendResult, error) {
	results, _, err := f.Sender.Send(cl.ctx, queue, msgs)
	if err != nil {
		return nil, err
	}
	fresh := 0
	for _, r := range results {
		if !r.Duplicate {
			fresh++
		}
	}
	if f.Metrics != nil {
		f.Metrics.ObserveSent(queue, fresh)
	}
	return results, nil
}
