package sqs

import (
	"fmt"
	"regexp"
	"time"

	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// SQS's bounds of a batch.
const (
	maxBatchEntries = 10
	maxBatchBytes   = 256 << 10
)

var batchIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatchIDs applies SQS's rules to a batch's entry ids: 1 to 10
// entries, each id 1-80 alphanumeric, hyphen or underscore characters,
// all distinct.
func checkBatchIDs(ids []string) error {
	switch {
	case len(ids) == 0:
		return fail(codeEmptyBatch, "There should be at least one entry in the request.")
	case len(ids) > maxBatchEntries:
		return fail(codeTooManyEntries, "Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !batchIDRe.MatchString(id) {
			return fail(codeInvalidBatchID, "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
		}
		if seen[id] {
			return fail(codeIdsNotDistinct, "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

// batchFailure is a failed entry of a batch.
type batchFailure struct {
	Id          string `json:"Id"` //nolint:revive // SQS's member name
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
}

// failure is the failed entry id for err.
func failure(id string, err error) batchFailure {
	e, _ := toAPIError(err)
	return batchFailure{Id: id, SenderFault: e.Sender, Code: e.Code, Message: e.Message}
}

type sendEntry struct {
	Id string `json:"Id"` //nolint:revive // SQS's member name
	messageFields
}

type sendMessageBatchInput struct {
	QueueUrl string      `json:"QueueUrl"` //nolint:revive // SQS's member name
	Entries  []sendEntry `json:"Entries" query:"SendMessageBatchRequestEntry"`
}

type sendBatchEntryOutput struct {
	Id string `json:"Id"` //nolint:revive // SQS's member name
	sendMessageOutput
}

type sendMessageBatchOutput struct {
	Successful []sendBatchEntryOutput `json:"Successful" xml:"SendMessageBatchResultEntry"`
	Failed     []batchFailure         `json:"Failed" xml:"BatchResultErrorEntry"`
}

// sendMessageBatch sends the valid entries in one store call (all or
// none of them) and answers the others as failed, each with its reason.
func (f *face) sendMessageBatch(cl *call) (any, error) {
	var in sendMessageBatchInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	ids, size := make([]string, len(in.Entries)), 0
	for i, e := range in.Entries {
		ids[i] = e.Id
		size += e.size()
	}
	if err := checkBatchIDs(ids); err != nil {
		return nil, err
	}
	if size > maxBatchBytes {
		return nil, fail(codeBatchTooLong, "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", maxBatchBytes, size)
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Send, true)
	if err != nil {
		return nil, err
	}
	out := sendMessageBatchOutput{Successful: []sendBatchEntryOutput{}, Failed: []batchFailure{}}
	var (
		msgs  []store.SendMessage
		infos []sent
		taken []string
	)
	for i, e := range in.Entries {
		m, s, err := f.toMessage(q, fmt.Sprintf("SendMessageBatchRequestEntry.%d", i+1), e.messageFields)
		if err != nil {
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		msgs, infos, taken = append(msgs, m), append(infos, s), append(taken, e.Id)
	}
	if len(msgs) == 0 {
		return out, nil
	}
	results, err := f.send(cl, q.Name, msgs)
	if err != nil {
		return nil, err
	}
	for i, r := range results {
		out.Successful = append(out.Successful, sendBatchEntryOutput{Id: taken[i], sendMessageOutput: infos[i].output(q.Name, r)})
	}
	return out, nil
}

type deleteMessageInput struct {
	QueueUrl      string `json:"QueueUrl"`      //nolint:revive // SQS's member name
	ReceiptHandle string `json:"ReceiptHandle"` //nolint:revive // SQS's member name
}

// parseReceipt is a receipt handle as the store reads it.
func parseReceipt(s string) (store.Receipt, error) {
	if s == "" {
		return store.Receipt{}, missingParam("ReceiptHandle")
	}
	r, err := store.ParseReceipt(s)
	if err != nil {
		return r, fail(codeReceiptInvalid, "The input receipt handle %q is not a valid receipt handle.", s)
	}
	return r, nil
}

// deleteMessage acks the receipt. A receipt that is no longer current (the
// message was received again, deleted or expired) deletes nothing and is
// no error, as on SQS.
func (f *face) deleteMessage(cl *call) (any, error) {
	var in deleteMessageInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Receive, true)
	if err != nil {
		return nil, err
	}
	r, err := parseReceipt(in.ReceiptHandle)
	if err != nil {
		return nil, err
	}
	return nil, f.ack(cl, q, []store.Receipt{r})
}

// ack acks receipts on q and counts what it acked.
func (f *face) ack(cl *call, q store.Queue, receipts []store.Receipt) error {
	results, err := store.MessageAckAndWake(cl.ctx, f.Pool, f.Notifier, q.ID, receipts)
	if err != nil {
		return err
	}
	if f.Metrics != nil {
		n := 0
		for _, r := range results {
			if r.OK {
				n++
			}
		}
		f.Metrics.ObserveAcked(q.Name, n)
	}
	return nil
}

type receiptEntry struct {
	Id                string `json:"Id"`            //nolint:revive // SQS's member name
	ReceiptHandle     string `json:"ReceiptHandle"` //nolint:revive // SQS's member name
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

type receiptBatchInput struct {
	QueueUrl string         `json:"QueueUrl"` //nolint:revive // SQS's member name
	Entries  []receiptEntry `json:"Entries"`
}

type idOutput struct {
	Id string `json:"Id"` //nolint:revive // SQS's member name
}

type deleteMessageBatchOutput struct {
	Successful []idOutput     `json:"Successful" xml:"DeleteMessageBatchResultEntry"`
	Failed     []batchFailure `json:"Failed" xml:"BatchResultErrorEntry"`
}

// receiptBatch decodes a batch of receipts whose Query entries are named
// entryName, checks its ids and resolves the queue.
func (f *face) receiptBatch(cl *call, entryName string) (store.Queue, []receiptEntry, error) {
	var in receiptBatchInput
	if cl.proto == protoQuery {
		// The Query protocol names the entries after the action.
		if err := decodeList(cl.form, entryName, refOf(&in.Entries)); err != nil {
			return store.Queue{}, nil, err
		}
		in.QueueUrl, _ = cl.form.get("QueueUrl")
	} else if err := cl.decode(&in); err != nil {
		return store.Queue{}, nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
	}
	if err := checkBatchIDs(ids); err != nil {
		return store.Queue{}, nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Receive, true)
	return q, in.Entries, err
}

// deleteMessageBatch acks the entries' valid receipts in one call; an
// entry whose receipt is not one Ferry made fails alone.
func (f *face) deleteMessageBatch(cl *call) (any, error) {
	q, entries, err := f.receiptBatch(cl, "DeleteMessageBatchRequestEntry")
	if err != nil {
		return nil, err
	}
	out := deleteMessageBatchOutput{Successful: []idOutput{}, Failed: []batchFailure{}}
	var receipts []store.Receipt
	for _, e := range entries {
		r, err := parseReceipt(e.ReceiptHandle)
		if err != nil {
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		receipts = append(receipts, r)
		out.Successful = append(out.Successful, idOutput{Id: e.Id})
	}
	if len(receipts) > 0 {
		if err := f.ack(cl, q, receipts); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type changeVisibilityInput struct {
	QueueUrl          string `json:"QueueUrl"`      //nolint:revive // SQS's member name
	ReceiptHandle     string `json:"ReceiptHandle"` //nolint:revive // SQS's member name
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

func (f *face) changeVisibility(cl *call) (any, error) {
	var in changeVisibilityInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	q, err := f.namedQueue(cl, in.QueueUrl, access.Receive, true)
	if err != nil {
		return nil, err
	}
	return nil, f.changeOne(cl, q, receiptEntry{ReceiptHandle: in.ReceiptHandle, VisibilityTimeout: in.VisibilityTimeout})
}

// changeOne moves the lease of one receipt: to now + the timeout, or for
// 0 ends it, the message visible again at once (a nack without delay). A
// receipt that is not current is MessageNotInflight.
func (f *face) changeOne(cl *call, q store.Queue, e receiptEntry) error {
	r, err := parseReceipt(e.ReceiptHandle)
	if err != nil {
		return err
	}
	if e.VisibilityTimeout == nil {
		return missingParam("VisibilityTimeout")
	}
	t := *e.VisibilityTimeout
	if t < 0 || t > 43200 {
		return invalidParam("VisibilityTimeout", "must be from 0 to 43200")
	}
	var results []store.ReceiptResult
	if t == 0 {
		zero := time.Duration(0)
		results, _, err = store.MessageNackAndWake(cl.ctx, f.Pool, f.Notifier, store.NackParams{Queue: q, Receipts: []store.Receipt{r}, Delay: &zero})
	} else {
		results, err = store.MessageExtend(cl.ctx, f.Pool, q.ID, []store.Receipt{r}, time.Duration(t)*time.Second)
	}
	if err != nil {
		return err
	}
	if !results[0].OK {
		return fail(codeNotInflight, "The message referred to isn't in flight.")
	}
	return nil
}

type changeVisibilityBatchOutput struct {
	Successful []idOutput     `json:"Successful" xml:"ChangeMessageVisibilityBatchResultEntry"`
	Failed     []batchFailure `json:"Failed" xml:"BatchResultErrorEntry"`
}

// changeVisibilityBatch changes each entry's visibility on its own; an
// entry's failure is its own.
func (f *face) changeVisibilityBatch(cl *call) (any, error) {
	q, entries, err := f.receiptBatch(cl, "ChangeMessageVisibilityBatchRequestEntry")
	if err != nil {
		return nil, err
	}
	out := changeVisibilityBatchOutput{Successful: []idOutput{}, Failed: []batchFailure{}}
	for _, e := range entries {
		if err := f.changeOne(cl, q, e); err != nil {
			if ae, internal := toAPIError(err); internal || !ae.Sender {
				return nil, err
			}
			out.Failed = append(out.Failed, failure(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, idOutput{Id: e.Id})
	}
	return out, nil
}
