package sqs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"time"

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

// toMessage checks one message for the named queue and converts it for
// the store; item names it in errors ("SendMessageBatchRequestEntry.2").
func (f *face) toMessage(queue, item string, m messageFields) (store.SendMessage, sent, error) {
	if m.MessageBody == nil || *m.MessageBody == "" {
		return store.SendMessage{}, sent{}, missingParam("MessageBody")
	}
	body := *m.MessageBody
	if !validBody(body) {
		return store.SendMessage{}, sent{}, fail(codeInvalidContents, "Invalid characters found in the message body.")
	}
	sm, err := fifoFields(queue, body, m)
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
	sm.Body, sm.Attributes, err = f.Limits.CheckMessage(item, bytes.TrimSpace(enc.Bytes()), toRESTAttributes(m.MessageAttributes, trace))
	if err != nil {
		return store.SendMessage{}, sent{}, err
	}
	return sm, sent{md5Body: sqsmd5.Body(body), md5Attrs: md5OfAttributes(m.MessageAttributes), md5System: md5OfTrace(trace)}, nil
}

// fifoFields applies the FIFO members: on a FIFO queue MessageGroupId is
// required and becomes the group, MessageDeduplicationId (else the
// SHA-256 of the body) the dedup_id, and no message has its own delay; on
// a standard queue neither member is allowed.
func fifoFields(queue, body string, m messageFields) (store.SendMessage, error) {
	var sm store.SendMessage
	if !isFifo(queue) {
		switch {
		case m.MessageGroupId != nil:
			return sm, invalidParam("MessageGroupId", "The request includes a parameter that is not valid for this queue type")
		case m.MessageDeduplicationId != nil:
			return sm, invalidParam("MessageDeduplicationId", "The request includes a parameter that is not valid for this queue type")
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
	}
	sm.Group = *m.MessageGroupId
	if m.MessageDeduplicationId != nil {
		sm.DedupID = *m.MessageDeduplicationId
	} else {
		sum := sha256.Sum256([]byte(body))
		sm.DedupID = hex.EncodeToString(sum[:])
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
	msg, s, err := f.toMessage(q.Name, "message", in.messageFields)
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
