package sqs

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/store"
)

// Queue attributes SQS defines and what Ferry does with each: settable
// ones map onto the REST queue's settings, fixed ones are answered and
// may be "set" only to the value Ferry has, read-only ones are computed.
const (
	attrVisibility      = "VisibilityTimeout"
	attrDelay           = "DelaySeconds"
	attrRetention       = "MessageRetentionPeriod"
	attrRedrive         = "RedrivePolicy"
	attrMaxSize         = "MaximumMessageSize"
	attrWait            = "ReceiveMessageWaitTimeSeconds"
	attrFifo            = "FifoQueue"
	attrContentDedup    = "ContentBasedDeduplication"
	attrDedupScope      = "DeduplicationScope"
	attrThroughputLimit = "FifoThroughputLimit"
)

// readOnlyAttrs are the attributes GetQueueAttributes computes.
var readOnlyAttrs = []string{ //nolint:gochecknoglobals // a read-only table
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed",
	"CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
}

// unsupportedAttrs are SQS attributes Ferry has no equivalent of yet.
var unsupportedAttrs = []string{ //nolint:gochecknoglobals // a read-only table
	"Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled",
}

// isFifo reports whether the named queue is a FIFO queue: its name ends
// in .fifo, whichever face made it.
func isFifo(name string) bool { return strings.HasSuffix(name, ".fifo") }

// queueSettings is what a CreateQueue or SetQueueAttributes asks.
type queueSettings struct {
	patch store.QueuePatch
}

// toSettings checks the attributes a CreateQueue (create) or a
// SetQueueAttributes gives the named queue and converts them.
func toSettings(name string, attrs map[string]string, create bool) (queueSettings, error) {
	var s queueSettings
	for k, v := range attrs {
		if err := s.set(name, k, v, create); err != nil {
			return s, err
		}
	}
	if create && isFifo(name) && attrs[attrFifo] != "true" {
		return s, invalidAttrValue(attrFifo, "a queue whose name ends in .fifo is a FIFO queue: give FifoQueue=true")
	}
	return s, nil
}

// set applies one attribute.
func (s *queueSettings) set(name, k, v string, create bool) error {
	p := &s.patch
	switch k {
	case attrVisibility:
		return intAttr(k, v, 0, 43200, &p.VisibilityTimeoutSeconds)
	case attrDelay:
		return intAttr(k, v, 0, 900, &p.DelaySeconds)
	case attrRetention:
		return intAttr(k, v, 60, 1209600, &p.RetentionSeconds)
	case attrRedrive:
		return s.redrive(v)
	case attrMaxSize:
		return intAttr(k, v, 1024, 262144, &p.MaxMessageSize)
	case attrWait:
		return intAttr(k, v, 0, 20, &p.ReceiveWaitSeconds)
	case attrFifo:
		switch {
		case !create:
			return fail(codeInvalidAttrName, "FifoQueue can be given only when the queue is created.")
		case v == "true" && !isFifo(name):
			return invalidAttrValue(k, "a FIFO queue's name must end in .fifo")
		case v == "false" && isFifo(name):
			return invalidAttrValue(k, "a queue whose name ends in .fifo is a FIFO queue")
		case v != "true" && v != "false":
			return invalidAttrValue(k, "must be true or false")
		}
		return nil
	case attrContentDedup, attrDedupScope, attrThroughputLimit:
		return s.fifoAttr(name, k, v)
	}
	for _, a := range append(readOnlyAttrs, unsupportedAttrs...) {
		if a == k {
			return fail(codeInvalidAttrName, "The attribute %s cannot be set on a Ferry queue (see docs/sqs.md).", k)
		}
	}
	return fail(codeInvalidAttrName, "Unknown Attribute %s.", k)
}

// redrive applies a RedrivePolicy: maxReceiveCount is the queue's
// max_receives, deadLetterTargetArn (a queue's ARN; its last part is the
// queue's name) its dead_letter_queue; without one, dead letters stay with
// the queue (GET /v1/queues/{queue}/dead-letters). "" removes the policy:
// the queue's messages are never dead-lettered (store.MaxReceivesNever).
func (s *queueSettings) redrive(v string) error {
	if v == "" { // SQS's way to remove the policy: never dead-lettered
		never, none := store.MaxReceivesNever, ""
		s.patch.MaxReceives, s.patch.DeadLetterQueue = &never, &none
		return nil
	}
	var rp struct {
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(v), &rp); err != nil || rp.MaxReceiveCount == nil {
		return invalidAttrValue(attrRedrive, `must be a JSON object with maxReceiveCount, such as {"maxReceiveCount":5}`)
	}
	dlq := ""
	if rp.DeadLetterTargetArn != "" {
		parts := strings.Split(rp.DeadLetterTargetArn, ":")
		if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || !handlers.ValidName(parts[5]) {
			return invalidAttrValue(attrRedrive, "deadLetterTargetArn must be a queue's ARN, arn:aws:sqs:<region>:000000000000:<queue>")
		}
		dlq = parts[5]
	}
	s.patch.DeadLetterQueue = &dlq
	count := strings.Trim(string(rp.MaxReceiveCount), `"`)
	return intAttr("RedrivePolicy.maxReceiveCount", count, 1, 1000, &s.patch.MaxReceives)
}

// intAttr parses an integer attribute within [lo, hi] into *dst.
func intAttr(k, v string, lo, hi int, dst **int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi || strconv.Itoa(n) != v {
		return invalidAttrValue(k, "must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
	}
	*dst = &n
	return nil
}

// fixedAttr accepts an attribute Ferry cannot change only at its value.
func fixedAttr(k, v, fixed string) error {
	if v != fixed {
		return invalidAttrValue(k, "Ferry's queues have "+k+" "+fixed+" and cannot change it yet")
	}
	return nil
}

// fifoAttr applies the FIFO attributes, valid on FIFO queues only:
// ContentBasedDeduplication is the queue's content_based_dedup; the
// scope and throughput limit are per queue, the one way Ferry has.
func (s *queueSettings) fifoAttr(name, k, v string) error {
	if !isFifo(name) {
		return fail(codeInvalidAttrName, "The attribute %s is only valid for FIFO queues.", k)
	}
	switch k {
	case attrContentDedup:
		if v != "true" && v != "false" {
			return invalidAttrValue(k, "must be true or false")
		}
		on := v == "true"
		s.patch.ContentBasedDedup = &on
		return nil
	case attrDedupScope:
		return fixedAttr(k, v, "queue")
	}
	return fixedAttr(k, v, "perQueue")
}

func invalidAttrValue(k, reason string) *apiError {
	return fail(codeInvalidAttrValue, "Invalid value for the parameter %s. Reason: %s.", k, reason)
}

// differs reports whether the settings ask anything q (whose
// MaximumMessageSize is maxSize) does not have: a CreateQueue of an
// existing queue with them is refused.
func (s queueSettings) differs(q store.Queue, maxSize int) bool {
	p := s.patch
	ne := func(v *int, have int) bool { return v != nil && *v != have }
	return ne(p.VisibilityTimeoutSeconds, q.VisibilityTimeoutSeconds) || ne(p.DelaySeconds, q.DelaySeconds) ||
		ne(p.RetentionSeconds, q.RetentionSeconds) || ne(p.MaxReceives, q.MaxReceives) ||
		(p.DeadLetterQueue != nil && *p.DeadLetterQueue != q.DeadLetterQueue) ||
		ne(p.ReceiveWaitSeconds, q.ReceiveWaitSeconds) || ne(p.MaxMessageSize, maxSize) ||
		(p.ContentBasedDedup != nil && *p.ContentBasedDedup != q.ContentBasedDedup)
}

// queueAttributes is every attribute of q (with its stats st) that
// GetQueueAttributes answers.
func (f *face) queueAttributes(cl *call, q store.Queue, st store.QueueStats) map[string]string {
	itoa := strconv.Itoa
	a := map[string]string{
		"ApproximateNumberOfMessages":           strconv.FormatInt(st.Available, 10),
		"ApproximateNumberOfMessagesNotVisible": strconv.FormatInt(st.InFlight, 10),
		"ApproximateNumberOfMessagesDelayed":    strconv.FormatInt(st.Delayed, 10),
		"CreatedTimestamp":                      strconv.FormatInt(q.CreatedAt.Unix(), 10),
		"LastModifiedTimestamp":                 strconv.FormatInt(q.UpdatedAt.Unix(), 10),
		"QueueArn":                              queueARN(cl, q.Name),
		attrVisibility:                          itoa(q.VisibilityTimeoutSeconds),
		attrDelay:                               itoa(q.DelaySeconds),
		attrRetention:                           itoa(q.RetentionSeconds),
		attrMaxSize:                             itoa(f.maxMessageSize(q)),
		attrWait:                                itoa(q.ReceiveWaitSeconds),
	}
	if q.MaxReceives != store.MaxReceivesNever {
		rp := map[string]any{"maxReceiveCount": q.MaxReceives}
		if q.DeadLetterQueue != "" {
			rp["deadLetterTargetArn"] = queueARN(cl, q.DeadLetterQueue)
		}
		redrive, _ := json.Marshal(rp)
		a[attrRedrive] = string(redrive)
	}
	if isFifo(q.Name) {
		a[attrFifo], a[attrDedupScope], a[attrThroughputLimit] = "true", "queue", "perQueue"
		a[attrContentDedup] = strconv.FormatBool(q.ContentBasedDedup)
	}
	return a
}

// knownAttr reports whether name is a queue attribute SQS defines (so
// that asking for it is no error, though Ferry may not answer it).
func knownAttr(name string) bool {
	switch name {
	case "All", attrVisibility, attrDelay, attrRetention, attrRedrive, attrMaxSize, attrWait,
		attrFifo, attrContentDedup, attrDedupScope, attrThroughputLimit:
		return true
	}
	for _, a := range append(readOnlyAttrs, unsupportedAttrs...) {
		if a == name {
			return true
		}
	}
	return false
}
