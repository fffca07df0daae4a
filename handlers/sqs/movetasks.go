package sqs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/ferry-mq/ferry/handlers"
	"github.com/ferry-mq/ferry/internal/access"
	"github.com/ferry-mq/ferry/store"
)

// Message move tasks (StartMessageMoveTask, ListMessageMoveTasks,
// CancelMessageMoveTask): the REST move (POST
// /v1/queues/{queue}/messages/move, [handlers.MessageMove]) run in steps
// by a goroutine of the instance that took the Start, for as long as the
// server runs; the task's record lives in that instance's memory (docs/sqs.md
// § Message move tasks).

// The statuses of a move task, as SQS names them.
const (
	taskRunning    = "RUNNING"
	taskCompleted  = "COMPLETED"
	taskCancelling = "CANCELLING"
	taskCancelled  = "CANCELLED"
	taskFailed     = "FAILED"
)

// Bounds of move tasks: the messages one step moves without a rate, the
// largest MaxNumberOfMessagesPerSecond (SQS's), and the tasks kept per
// source queue (SQS lists at most 10).
const (
	moveStep        = 1000
	moveMaxRate     = 500
	moveTasksKept   = 10
	moveCodeUnknown = "ResourceNotFoundException"
)

// moveTask is one move task; its mutable fields are guarded by mu.
type moveTask struct {
	// dest is "" for a task without DestinationArn on a dead-letter queue
	// of several sources: each message moves back to its own source, one
	// of backTo.
	handle, source, dest string
	backTo               []string
	rate                 int32 // 0: as fast as the move goes
	toMove               int64
	started              time.Time
	cancel               chan struct{} // closed by a Cancel

	mu      sync.Mutex
	status  string
	moved   int64
	failure string
}

// view is a consistent copy of the task's mutable fields.
func (t *moveTask) view() (status string, moved int64, failure string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, t.moved, t.failure
}

// finish ends the task with a status: CANCELLED when a Cancel came first.
func (t *moveTask) finish(status, failure string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status == taskCancelling && status == taskCompleted {
		status = taskCancelled
	}
	t.status, t.failure = status, failure
}

// moveTasks is the move tasks this instance started, by handle and, newest
// first, by source queue.
type moveTasks struct {
	mu       sync.Mutex
	byHandle map[string]*moveTask
	bySource map[string][]*moveTask
}

func newMoveTasks() *moveTasks {
	return &moveTasks{byHandle: map[string]*moveTask{}, bySource: map[string][]*moveTask{}}
}

// add registers t unless its source queue has an active task, which it
// answers instead; of the source's tasks only the newest moveTasksKept are
// kept.
func (m *moveTasks) add(t *moveTask) *moveTask {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.bySource[t.source] {
		if st, _, _ := o.view(); st == taskRunning || st == taskCancelling {
			return o
		}
	}
	list := append([]*moveTask{t}, m.bySource[t.source]...)
	for _, old := range list[min(len(list), moveTasksKept):] {
		delete(m.byHandle, old.handle)
	}
	m.bySource[t.source] = list[:min(len(list), moveTasksKept)]
	m.byHandle[t.handle] = t
	return nil
}

// get is the task of a handle, or nil.
func (m *moveTasks) get(handle string) *moveTask {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byHandle[handle]
}

// ofSource is the source queue's tasks, newest first.
func (m *moveTasks) ofSource(source string) []*moveTask {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*moveTask(nil), m.bySource[source]...)
}

// arnQueue is the queue an SQS queue ARN names, or "" when arn is not one.
func arnQueue(arn string) string {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || !handlers.ValidName(parts[5]) {
		return ""
	}
	return parts[5]
}

// notFound is SQS's ResourceNotFoundException.
func notFound(format string, args ...any) *apiError {
	return fail(moveCodeUnknown, format, args...)
}

// existingQueue is the named queue, ResourceNotFoundException when there
// is none (as SQS answers for a move task's queues).
func (f *face) existingQueue(cl *call, name string) (store.Queue, error) {
	q, err := store.QueueGet(cl.ctx, f.Pool, name)
	if errors.Is(err, store.ErrNotFound) {
		return q, notFound("The queue %s does not exist.", name)
	}
	return q, err
}

type startMoveInput struct {
	SourceArn                    string `json:"SourceArn"`
	DestinationArn               string `json:"DestinationArn"`
	MaxNumberOfMessagesPerSecond *int   `json:"MaxNumberOfMessagesPerSecond"`
}

type startMoveOutput struct {
	TaskHandle string `json:"TaskHandle"`
}

// startMoveTask checks the task and starts it (see [face.runMove]).
func (f *face) startMoveTask(cl *call) (any, error) {
	var in startMoveInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	t, err := f.checkMoveTask(cl, in)
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	t.handle = "mt_" + hex.EncodeToString(b[:])
	t.status, t.started, t.cancel = taskRunning, time.Now(), make(chan struct{})
	if active := f.tasks.add(t); active != nil {
		return nil, fail(codeUnsupported, "The queue %s already has a running message move task; only one is supported at a time.", t.source)
	}
	f.Background.Add(1)
	go func() {
		defer f.Background.Done()
		f.runMove(t)
	}()
	return startMoveOutput{TaskHandle: t.handle}, nil
}

// checkMoveTask checks a Start: SourceArn a queue that is some queue's
// dead-letter queue (SQS's rule), on which the key has manage;
// DestinationArn another queue, or, without one, the source's source
// queues (each message back to its own), on which it has send;
// MaxNumberOfMessagesPerSecond 1–500.
func (f *face) checkMoveTask(cl *call, in startMoveInput) (*moveTask, error) {
	t := &moveTask{source: arnQueue(in.SourceArn), dest: arnQueue(in.DestinationArn)}
	switch {
	case in.SourceArn == "":
		return nil, missingParam("SourceArn")
	case t.source == "":
		return nil, invalidParam("SourceArn", "must be a queue's ARN, arn:aws:sqs:<region>:000000000000:<queue>")
	case in.DestinationArn != "" && t.dest == "":
		return nil, invalidParam("DestinationArn", "must be a queue's ARN, arn:aws:sqs:<region>:000000000000:<queue>")
	case in.MaxNumberOfMessagesPerSecond != nil && (*in.MaxNumberOfMessagesPerSecond < 1 || *in.MaxNumberOfMessagesPerSecond > moveMaxRate):
		return nil, invalidParam("MaxNumberOfMessagesPerSecond", "must be between 1 and 500")
	}
	if in.MaxNumberOfMessagesPerSecond != nil {
		t.rate = int32(*in.MaxNumberOfMessagesPerSecond) //nolint:gosec // 1–500, checked above
	}
	if err := cl.permit(t.source, access.Manage); err != nil {
		return nil, err
	}
	src, err := f.existingQueue(cl, t.source)
	if err != nil {
		return nil, err
	}
	all, err := store.DeadLetterSources(cl.ctx, f.Pool, []int64{src.ID})
	if err != nil {
		return nil, err
	}
	var sources []string
	for _, n := range all[src.ID] {
		if !strings.Contains(n, "/") { // not a subscription
			sources = append(sources, n)
		}
	}
	switch {
	case len(sources) == 0:
		return nil, invalidParam("SourceArn", "must be a dead-letter queue: a queue that another queue's RedrivePolicy names")
	case t.dest == "" && len(sources) > 1:
		t.backTo = sources
	case t.dest == "":
		t.dest = sources[0]
	case t.dest == t.source:
		return nil, invalidParam("DestinationArn", "must be another queue than the source")
	}
	for _, d := range t.targets() {
		if err := cl.permit(d, access.Send); err != nil {
			return nil, err
		}
		if _, err := f.existingQueue(cl, d); err != nil {
			return nil, err
		}
	}
	stats, err := store.QueueStatsGet(cl.ctx, f.Pool, []int64{src.ID})
	if err != nil {
		return nil, err
	}
	t.toMove = stats[src.ID].Available
	return t, nil
}

// targets are the queues the task moves into: its destination, or the
// sources its messages move back to.
func (t *moveTask) targets() []string {
	if t.dest != "" {
		return []string{t.dest}
	}
	return t.backTo
}

// runMove runs the task t: the REST move of up to moveStep messages (or,
// with a rate, that many a second) again and again, until a step moves
// fewer than it asked (the source holds no more available messages:
// COMPLETED), a Cancel (CANCELLED), an error (FAILED: a queue deleted, or
// the server's own, logged) or the server's stop (FAILED). Without a
// destination, it moves the messages dead-lettered from each source back
// into it, one source after another (handlers.MessageMoveBack); a message
// of no current source stays.
func (f *face) runMove(t *moveTask) {
	step := moveStep
	if t.rate > 0 {
		step = int(t.rate)
	}
	targets := t.targets()
	for len(targets) > 0 {
		began := time.Now()
		move := handlers.MessageMove
		if t.dest == "" {
			move = handlers.MessageMoveBack
		}
		n, err := move(f.life, f.Pool, f.Notifier, t.source, targets[0], step)
		t.mu.Lock()
		t.moved += int64(n)
		t.mu.Unlock()
		switch {
		case errors.Is(err, store.ErrNotFound):
			t.finish(taskFailed, "a queue of the task was deleted")
			return
		case err != nil && f.life.Err() != nil:
			t.finish(taskFailed, "the Ferry instance running the task stopped")
			return
		case err != nil:
			f.Log.Error("sqs message move task failed", "task", t.handle, "source", t.source, "destination", t.dest, "error", err)
			t.finish(taskFailed, "an internal error; see the server log for the task handle")
			return
		case n < step && len(targets) == 1:
			t.finish(taskCompleted, "")
			return
		case n < step:
			targets = targets[1:]
		}
		wait := time.Duration(0)
		if t.rate > 0 {
			wait = time.Until(began.Add(time.Second))
		}
		if !f.pause(t, wait) {
			return
		}
	}
}

// pause waits d before the task's next step; false when the task ended
// meanwhile (cancelled, or the server stopped), which it records.
func (f *face) pause(t *moveTask, d time.Duration) bool {
	timer := time.NewTimer(max(d, 0))
	defer timer.Stop()
	select {
	case <-t.cancel:
		t.finish(taskCancelled, "")
		return false
	case <-f.life.Done():
		t.finish(taskFailed, "the Ferry instance running the task stopped")
		return false
	case <-timer.C:
		return true
	}
}

type listMoveInput struct {
	SourceArn  string `json:"SourceArn"`
	MaxResults *int   `json:"MaxResults"`
}

type moveTaskEntry struct {
	TaskHandle                        string `json:"TaskHandle,omitempty" xml:",omitempty"`
	Status                            string `json:"Status"`
	SourceArn                         string `json:"SourceArn"`
	DestinationArn                    string `json:"DestinationArn,omitempty" xml:",omitempty"`
	MaxNumberOfMessagesPerSecond      *int32 `json:"MaxNumberOfMessagesPerSecond,omitempty" xml:",omitempty"`
	ApproximateNumberOfMessagesMoved  int64  `json:"ApproximateNumberOfMessagesMoved"`
	ApproximateNumberOfMessagesToMove int64  `json:"ApproximateNumberOfMessagesToMove"`
	FailureReason                     string `json:"FailureReason,omitempty" xml:",omitempty"`
	StartedTimestamp                  int64  `json:"StartedTimestamp"`
}

type listMoveOutput struct {
	Results []moveTaskEntry `json:"Results" xml:"ListMessageMoveTasksResultEntry"`
}

// listMoveTasks answers the source queue's newest tasks that this
// instance started, MaxResults (1–10, default 1) of them; a task's handle
// only while it runs, as SQS.
func (f *face) listMoveTasks(cl *call) (any, error) {
	var in listMoveInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	limit := 1
	source := arnQueue(in.SourceArn)
	switch {
	case in.SourceArn == "":
		return nil, missingParam("SourceArn")
	case source == "":
		return nil, invalidParam("SourceArn", "must be a queue's ARN, arn:aws:sqs:<region>:000000000000:<queue>")
	case in.MaxResults != nil && (*in.MaxResults < 1 || *in.MaxResults > moveTasksKept):
		return nil, invalidParam("MaxResults", "must be between 1 and 10")
	case in.MaxResults != nil:
		limit = *in.MaxResults
	}
	if err := cl.permit(source, access.Manage); err != nil {
		return nil, err
	}
	if _, err := f.existingQueue(cl, source); err != nil {
		return nil, err
	}
	out := listMoveOutput{Results: []moveTaskEntry{}}
	for _, t := range f.tasks.ofSource(source) {
		if len(out.Results) == limit {
			break
		}
		status, moved, failure := t.view()
		e := moveTaskEntry{Status: status, SourceArn: queueARN(cl, t.source),
			ApproximateNumberOfMessagesMoved: moved, ApproximateNumberOfMessagesToMove: t.toMove,
			FailureReason: failure, StartedTimestamp: t.started.UnixMilli()}
		if t.dest != "" { // without one, as SQS, none is listed
			e.DestinationArn = queueARN(cl, t.dest)
		}
		if status == taskRunning {
			e.TaskHandle = t.handle
		}
		if t.rate > 0 {
			e.MaxNumberOfMessagesPerSecond = &t.rate
		}
		out.Results = append(out.Results, e)
	}
	return out, nil
}

type cancelMoveInput struct {
	TaskHandle string `json:"TaskHandle"`
}

type cancelMoveOutput struct {
	ApproximateNumberOfMessagesMoved int64 `json:"ApproximateNumberOfMessagesMoved"`
}

// cancelMoveTask asks a running task to stop: CANCELLING until its step
// under way ends, then CANCELLED; the messages moved stay moved.
func (f *face) cancelMoveTask(cl *call) (any, error) {
	var in cancelMoveInput
	if err := cl.decode(&in); err != nil {
		return nil, err
	}
	if in.TaskHandle == "" {
		return nil, missingParam("TaskHandle")
	}
	t := f.tasks.get(in.TaskHandle)
	if t == nil {
		return nil, notFound("No message move task with the handle %s: this Ferry instance did not start it, or it is gone.", in.TaskHandle)
	}
	if err := cl.permit(t.source, access.Manage); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status != taskRunning {
		return nil, fail(codeUnsupported, "The task is %s: only a RUNNING task can be cancelled.", t.status)
	}
	t.status = taskCancelling
	close(t.cancel)
	return cancelMoveOutput{ApproximateNumberOfMessagesMoved: t.moved}, nil
}
