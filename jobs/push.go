package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferry-mq/ferry/store"
)

// Push delivery. A queue or subscription with push is delivered by a River
// job per target (PushArgs, unique while it waits or runs, so one worker in
// the whole cluster serves a target at a time: max_in_flight and the rate
// limit hold across instances). The worker claims messages with the same
// claim engine consumers use, POSTs each (signed, Standard Webhooks),
// acks on 2xx and nacks otherwise (backoff, Retry-After, dead letters after
// max_receives), records every attempt, and stays while there is work,
// woken by the Notifier as a long poll is. It leaves after a while idle or
// after a run budget, so worker slots turn over. A job is started by a kick
// after a send or publish commits (Pusher.Kick) and by a sweep every
// second (PushSweepArgs) that finds targets with due messages: retries after
// backoff, missed kicks and targets of a crashed instance (whose leases
// expire, so nothing is lost).

// PushQueue is the River queue push jobs run in.
const PushQueue = "ferry_push"

// PushArgs: deliver one push target's due messages.
type PushArgs struct {
	QueueID int64 `json:"queue_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (PushArgs) Kind() string { return "ferry_push" }

// InsertOpts makes push jobs unique per target while pending, waiting or
// running.
func (PushArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       PushQueue,
		MaxAttempts: 1000,
		UniqueOpts: river.UniqueOpts{
			ByArgs: true,
			ByState: []rivertype.JobState{
				rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
				rivertype.JobStateScheduled, rivertype.JobStateRetryable,
			},
		},
	}
}

// PushSweepArgs: start push jobs for targets with due messages.
type PushSweepArgs struct{}

// Kind implements river.JobArgs.
func (PushSweepArgs) Kind() string { return "ferry_push_sweep" }

// PushConfig tunes push delivery.
type PushConfig struct {
	// Client makes the requests (NewPushClient: SSRF checks at dial time,
	// no redirects).
	Client *http.Client
	// UserAgent is sent with every request ("Ferry/<version>").
	UserAgent string
	// DisableAfter disables a target whose every attempt has failed for
	// this long (default 5 days).
	DisableAfter time.Duration
	// RunFor bounds one job run (default 10 s); IdleFor is how long a
	// worker waits for new work before leaving (default 5 s); Poll is how
	// often an idle worker looks without a wake-up (default 250 ms).
	RunFor, IdleFor, Poll time.Duration
	// Notifier wakes workers when their target gets messages.
	Notifier *store.Notifier
	// Stop is closed when the server shuts down: workers stop claiming,
	// finish the requests in flight and settle them.
	Stop <-chan struct{}
	Log  *slog.Logger
	// Observe, if set, is told of every attempt: its outcome ("ok",
	// "failed", "gone") and, for successes, the time from the message's
	// send (or event's publish) to its delivery.
	Observe func(outcome string, sinceSent time.Duration)
}

// Pusher starts push jobs. Kick is cheap and never blocks its caller: the
// targets are handed to a goroutine that inserts their jobs in batches.
type Pusher struct {
	pool    *pgxpool.Pool
	cfg     PushConfig
	kicks   chan []int64
	mu      sync.Mutex
	client  *river.Client[pgx.Tx]
	targets map[int64]bool // enabled push targets, refreshed every second
	running map[int64]bool // targets with a worker in this process
	loaded  time.Time
}

// NewPusher makes a Pusher; Run must run for kicks to take effect.
func NewPusher(pool *pgxpool.Pool, cfg PushConfig) *Pusher {
	if cfg.DisableAfter <= 0 {
		cfg.DisableAfter = 5 * 24 * time.Hour
	}
	if cfg.RunFor <= 0 {
		cfg.RunFor = DefaultPushRunFor
	}
	if cfg.IdleFor <= 0 {
		cfg.IdleFor = 5 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = NewPushClient(false)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Pusher{pool: pool, cfg: cfg, kicks: make(chan []int64, 1024), running: map[int64]bool{}}
}

// Run inserts kicked jobs with client until ctx ends.
func (p *Pusher) Run(ctx context.Context, client *river.Client[pgx.Tx]) {
	p.mu.Lock()
	p.client = client
	p.mu.Unlock()
	for {
		var ids []int64
		select {
		case <-ctx.Done():
			return
		case ids = <-p.kicks:
		}
		// Take whatever else is waiting: one insert for all of it.
	more:
		for {
			select {
			case more := <-p.kicks:
				ids = append(ids, more...)
			default:
				break more
			}
		}
		if err := p.insert(ctx, ids); err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("push kick", "error", err)
		}
	}
}

// Kick asks for the given queues (or subscriptions) to be pushed now, if
// they are push targets. Call it after the commit that gave them messages.
func (p *Pusher) Kick(ctx context.Context, queueIDs []int64) {
	if len(queueIDs) == 0 {
		return
	}
	select {
	case p.kicks <- queueIDs:
	default: // full: the sweep will find them
	}
}

// Forget drops the cached set of push targets (after a change of push
// configuration), so the next kick reads it again.
func (p *Pusher) Forget() {
	p.mu.Lock()
	p.loaded = time.Time{}
	p.mu.Unlock()
}

// insert inserts push jobs for the ids that are enabled push targets with
// no worker in this process (a running worker is woken by the Notifier).
func (p *Pusher) insert(ctx context.Context, ids []int64) error {
	p.mu.Lock()
	stale := time.Since(p.loaded) > time.Second
	p.mu.Unlock()
	if stale {
		targets, err := store.PushTargetIDs(ctx, p.pool)
		if err != nil {
			return err
		}
		set := make(map[int64]bool, len(targets))
		for _, id := range targets {
			set[id] = true
		}
		p.mu.Lock()
		p.targets, p.loaded = set, time.Now()
		p.mu.Unlock()
	}
	p.mu.Lock()
	var params []river.InsertManyParams
	seen := map[int64]bool{}
	for _, id := range ids {
		if p.targets[id] && !p.running[id] && !seen[id] {
			seen[id] = true
			params = append(params, river.InsertManyParams{Args: PushArgs{QueueID: id}})
		}
	}
	client := p.client
	p.mu.Unlock()
	if len(params) == 0 || client == nil {
		return nil
	}
	_, err := client.InsertMany(ctx, params)
	return err
}

func (p *Pusher) enter(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running[id] {
		return false
	}
	p.running[id] = true
	return true
}

func (p *Pusher) leave(id int64) {
	p.mu.Lock()
	delete(p.running, id)
	p.mu.Unlock()
}

// PushSweepWorker runs PushSweepArgs.
type PushSweepWorker struct {
	river.WorkerDefaults[PushSweepArgs]
	Pool *pgxpool.Pool
}

// Work inserts a push job for every target with due messages (unique:
// targets already being served are skipped by the insert).
func (w *PushSweepWorker) Work(ctx context.Context, job *river.Job[PushSweepArgs]) error {
	ids, err := store.PushTargetsDue(ctx, w.Pool)
	if err != nil || len(ids) == 0 {
		return err
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: PushArgs{QueueID: id}}
	}
	_, err = river.ClientFromContext[pgx.Tx](ctx).InsertMany(ctx, params)
	return err
}

// PushWorker runs PushArgs.
type PushWorker struct {
	river.WorkerDefaults[PushArgs]
	Pool   *pgxpool.Pool
	Pusher *Pusher
}

// Timeout bounds a run: its budget, plus the longest request, plus
// settling. It is kept short because a job left "running" by a crashed
// instance blocks its target until River rescues it, which must wait
// longer than any job may run (see RescueStuckJobsAfter in
// internal/server).
func (w *PushWorker) Timeout(*river.Job[PushArgs]) time.Duration {
	return PushJobTimeout(w.Pusher.cfg.RunFor)
}

// DefaultPushRunFor is a push job's run budget when PushConfig has none.
const DefaultPushRunFor = 10 * time.Second

// PushJobTimeout is the longest a push job with the given run budget runs:
// the budget, the longest request, and the settling of the last round.
func PushJobTimeout(runFor time.Duration) time.Duration {
	return runFor + time.Duration(maxPushTimeout)*time.Second + 40*time.Second
}

// maxPushTimeout bounds push.timeout_seconds (handlers validate it).
const maxPushTimeout = 60

// leaseSlack is added to a request's timeout for the lease of the message
// it carries, so the lease outlives the request and its settling.
const leaseSlack = 60 * time.Second

// pushResult is how one request went.
type pushResult struct {
	msg        store.Message
	publicID   string
	status     int // 0: no response
	err        string
	dur        time.Duration
	retryAfter *time.Duration
}

func (r pushResult) ok() bool   { return r.status >= 200 && r.status < 300 }
func (r pushResult) gone() bool { return r.status == http.StatusGone }

// Work delivers the target's messages until it is idle, its run budget is
// spent or the server stops.
func (w *PushWorker) Work(ctx context.Context, job *river.Job[PushArgs]) error {
	cfg := w.Pusher.cfg
	id := job.Args.QueueID
	if !w.Pusher.enter(id) {
		return nil
	}
	defer w.Pusher.leave(id)
	t, err := store.PushTargetGet(ctx, w.Pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var (
		results   = make(chan pushResult, maxPushInFlight)
		inFlight  = 0
		pending   []pushResult
		limiter   rateLimiter
		runUntil  = time.Now().Add(cfg.RunFor)
		idleUntil = time.Now().Add(cfg.IdleFor)
		refreshAt = time.Now().Add(time.Second)
		more      = false // stopped with work left
		// mayHaveWork: a claim may find something. False after a claim
		// that found fewer than it asked for, until a wake-up, the poll,
		// or a settle that may have released or promoted a message.
		mayHaveWork = true
	)
	// Requests and settling outlive a cancelled job context only as long
	// as they must: requests have their own timeout, settling its own.
	reqCtx := context.WithoutCancel(ctx)
	// A change of the target's push configuration (a new secret, URL or
	// limits, push removed) is announced on its config key: it applies
	// from the next claim. A periodic re-read covers a lost announcement.
	changed := cfg.Notifier.Wait(store.PushConfigWakeKey(id))
	refresh := func() {
		changed = cfg.Notifier.Wait(store.PushConfigWakeKey(id))
		if nt, err := store.PushTargetGet(ctx, w.Pool, id); err == nil {
			nt.FailingSince = t.FailingSince
			t = nt
		} else if errors.Is(err, store.ErrNotFound) {
			t.Push = nil
		}
		refreshAt = time.Now().Add(time.Second)
	}
	for t.Push != nil && t.DisabledAt == nil {
		if isClosed(changed) {
			if refresh(); t.Push == nil || t.DisabledAt != nil {
				break
			}
		}
		limiter.setRate(t.Push.RateLimitPerSecond)
		stopping := isClosed(cfg.Stop) || ctx.Err() != nil || time.Now().After(runUntil)
		wake := cfg.Notifier.Wait(id) // before the claim: no wake-up is lost
		claimed := 0
		if !stopping && inFlight < t.Push.MaxInFlight && mayHaveWork {
			n := t.Push.MaxInFlight - inFlight
			if lim := limiter.allowance(); lim < n {
				n = lim
			}
			if n > 0 {
				msgs, _, err := store.MessageClaim(ctx, w.Pool, store.ClaimParams{
					Queue: t.Queue, Max: n,
					VisibilityTimeout: time.Duration(t.Push.TimeoutSeconds)*time.Second + leaseSlack,
				})
				if err != nil {
					cfg.Log.Warn("push claim", "queue_id", id, "error", err)
					more = true
					break
				}
				for _, m := range msgs {
					limiter.take()
					inFlight++
					go func(t store.PushTarget, m store.Message) { results <- w.deliver(reqCtx, t, m) }(t, m)
				}
				claimed = len(msgs)
				mayHaveWork = claimed == n
			}
		}
		if claimed > 0 {
			idleUntil = time.Now().Add(cfg.IdleFor)
		}
		if inFlight == 0 && claimed == 0 {
			if stopping {
				// The run budget is spent: run again at once if a claim
				// may find work (on shutdown, the sweep of whichever
				// instance is up takes over).
				more = mayHaveWork && !isClosed(cfg.Stop) && ctx.Err() == nil
				break
			}
			if time.Now().After(idleUntil) {
				break
			}
		}
		// Wait for a result, a wake-up (when a slot is free), the rate
		// limiter, or the poll.
		var wakeCh <-chan struct{}
		if !stopping && inFlight < t.Push.MaxInFlight {
			wakeCh = wake
		}
		// Once stopping, only results matter: a closed Stop or a done
		// context would end every wait at once and spin the loop.
		stopCh, doneCh := cfg.Stop, ctx.Done()
		if stopping {
			stopCh, doneCh = nil, nil
		}
		timer := time.NewTimer(min(cfg.Poll, limiter.untilNext()))
		select {
		case r := <-results:
			inFlight--
			pending = append(pending, r)
		case <-wakeCh:
			mayHaveWork = true
		case <-changed:
		case <-timer.C:
			mayHaveWork = true
		case <-stopCh:
		case <-doneCh:
		}
		timer.Stop()
		if isClosed(wake) {
			mayHaveWork = true // woken while requests were in flight
		}
	drain:
		for {
			select {
			case r := <-results:
				inFlight--
				pending = append(pending, r)
			default:
				break drain
			}
		}
		if len(pending) > 0 {
			// A failure released a message (maybe visible at once), and
			// an ack may have promoted the next of a group.
			if w.settle(&t, pending) {
				mayHaveWork = true
			}
			pending = pending[:0]
		}
		if time.Now().After(refreshAt) {
			refresh()
		}
	}
	for inFlight > 0 {
		pending = append(pending, <-results)
		inFlight--
	}
	w.settle(&t, pending)
	if more {
		return river.JobSnooze(0) // run again at once, here or elsewhere
	}
	return nil
}

// deliver POSTs one message to the target and reports how it went.
func (w *PushWorker) deliver(ctx context.Context, t store.PushTarget, m store.Message) pushResult {
	cfg := w.Pusher.cfg
	r := pushResult{msg: m}
	body, traceparent := pushBody(t, m)
	r.publicID = store.FormatMessageID(m.ID)
	if m.EventID != nil {
		r.publicID = *m.EventID
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(t.Push.TimeoutSeconds)*time.Second)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.Push.URL, bytes.NewReader(body))
	if err != nil {
		r.err = "cannot make the request: " + err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", cfg.UserAgent)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	WebhookHeaders(req.Header, t.Secrets, r.publicID, start, body)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		r.dur = time.Since(start)
		switch {
		case errors.Is(err, ErrForbiddenAddress):
			r.err = "refused: the URL resolves to a forbidden address"
		case ctx.Err() != nil:
			r.err = fmt.Sprintf("timeout: no response within %d s", t.Push.TimeoutSeconds)
		default:
			r.err = truncate(err.Error(), 1000)
		}
		return r
	}
	// Read (a bounded part of) the body within the timeout, so a slow body
	// counts against the endpoint, and the connection can be reused.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	r.dur = time.Since(start)
	r.status = resp.StatusCode
	switch {
	case r.ok() && rerr != nil && ctx.Err() != nil:
		r.err = fmt.Sprintf("timeout: the response body did not end within %d s", t.Push.TimeoutSeconds)
		r.status = 0
	case r.ok():
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		r.err = fmt.Sprintf("HTTP %d: redirects are not followed", resp.StatusCode)
	default:
		r.err = fmt.Sprintf("HTTP %d", resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			r.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	return r
}

// pushBody is what is POSTed: a subscription's event as stored, or a
// queue's message as a consumer would receive it (without a receipt).
// traceparent is passed through from the attributes when present and valid
// (sends and publishes refuse invalid ones; older rows may hold one, and a
// header net/http refuses would fail every attempt).
func pushBody(t store.PushTarget, m store.Message) ([]byte, string) {
	body, traceparent := pushPayload(t, m)
	if !ValidTraceparent(traceparent) {
		traceparent = ""
	}
	return body, traceparent
}

func pushPayload(t store.PushTarget, m store.Message) ([]byte, string) {
	if t.Subscription {
		var ev struct {
			Attributes map[string]string `json:"attributes"`
		}
		_ = json.Unmarshal(m.Body, &ev)
		return m.Body, ev.Attributes["traceparent"]
	}
	attrs := map[string]string{}
	if len(m.Attributes) > 0 {
		_ = json.Unmarshal(m.Attributes, &attrs)
	}
	body, _ := json.Marshal(struct {
		ID           string            `json:"id"`
		Body         json.RawMessage   `json:"body"`
		Attributes   map[string]string `json:"attributes"`
		Group        *string           `json:"group"`
		DedupID      *string           `json:"dedup_id"`
		ReceiveCount int               `json:"receive_count"`
		SentAt       time.Time         `json:"sent_at"`
	}{store.FormatMessageID(m.ID), m.Body, attrs, m.Group, m.DedupID, m.ReceiveCount, m.SentAt.UTC()})
	return body, attrs["traceparent"]
}

// maxRetryAfter caps a receiver's Retry-After.
const maxRetryAfter = time.Hour

// parseRetryAfter reads a Retry-After header (seconds or an HTTP date),
// capped at maxRetryAfter; nil when absent or unreadable.
func parseRetryAfter(v string, now time.Time) *time.Duration {
	if v == "" {
		return nil
	}
	var d time.Duration
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return nil
		}
		d = time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(0, t.Sub(now))
	} else {
		return nil
	}
	d = min(d, maxRetryAfter)
	return &d
}

// settle acks the successes, nacks the failures (after Retry-After, or
// with the target's backoff; dead-lettered on the last allowed attempt),
// records the attempts and the target's failure state.
// It reports whether a claim may now find a message it did not before.
func (w *PushWorker) settle(t *store.PushTarget, results []pushResult) bool {
	if len(results) == 0 {
		return false
	}
	cfg := w.Pusher.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		acks      []store.Receipt
		nacks     = map[nackKey][]store.Receipt{}
		attempts  = make([]store.PushAttempt, 0, len(results))
		succeeded bool
		gone      bool
	)
	grouped := false
	for _, r := range results {
		grouped = grouped || r.msg.Group != nil
		a := store.PushAttempt{MessageID: r.publicID, Attempt: r.msg.ReceiveCount, OK: r.ok(), Duration: r.dur, At: time.Now()}
		if r.status != 0 {
			code := r.status
			a.StatusCode = &code
		}
		if r.err != "" {
			e := r.err
			a.Error = &e
		}
		attempts = append(attempts, a)
		outcome := "failed"
		switch {
		case r.ok():
			acks = append(acks, r.msg.Receipt)
			succeeded = true
			outcome = "ok"
		default:
			gone = gone || r.gone()
			if r.gone() {
				outcome = "gone"
			}
			d := time.Duration(-1)
			if r.retryAfter != nil {
				d = *r.retryAfter
			}
			k := nackKey{delay: d, err: r.err}
			nacks[k] = append(nacks[k], r.msg.Receipt)
		}
		if cfg.Observe != nil {
			var since time.Duration
			if r.ok() {
				since = time.Since(r.msg.SentAt)
			}
			cfg.Observe(outcome, since)
		}
	}
	if len(acks) > 0 {
		var err error
		if grouped {
			var promoted bool
			_, promoted, err = store.MessageAck(ctx, w.Pool, t.ID, acks)
			if promoted {
				cfg.Notifier.Published([]int64{t.ID})
			}
		} else {
			_, err = store.MessageAckUngrouped(ctx, w.Pool, t.ID, acks)
		}
		if err != nil {
			cfg.Log.Warn("push ack", "queue_id", t.ID, "error", err)
		}
	}
	for k, receipts := range nacks {
		// One nack per (delay, error): each message keeps its own error.
		p := store.NackParams{Queue: t.Queue, Receipts: receipts}
		e := k.err
		p.Error = &e
		if k.delay >= 0 {
			d := k.delay
			p.Delay = &d
		}
		if _, _, err := store.MessageNack(ctx, w.Pool, p); err != nil {
			cfg.Log.Warn("push nack", "queue_id", t.ID, "error", err)
		}
	}
	if err := store.PushAttemptRecord(ctx, w.Pool, t.ID, attempts); err != nil {
		cfg.Log.Warn("push attempts", "queue_id", t.ID, "error", err)
	}
	// The failure state changes rarely: write only when it may.
	failing := !succeeded
	if gone || (failing && (t.FailingSince == nil || time.Since(*t.FailingSince) > cfg.DisableAfter)) || (!failing && t.FailingSince != nil) {
		reason := ""
		if gone {
			reason = "the endpoint answered 410 Gone"
		}
		disabled, err := store.PushOutcome(ctx, w.Pool, t.ID, succeeded, reason, cfg.DisableAfter)
		if err != nil {
			cfg.Log.Warn("push state", "queue_id", t.ID, "error", err)
			return true
		}
		if succeeded {
			t.FailingSince = nil
		} else if t.FailingSince == nil {
			now := time.Now()
			t.FailingSince = &now
		}
		if disabled {
			now := time.Now()
			t.DisabledAt = &now
			cfg.Log.Warn("push disabled", "queue_id", t.ID, "reason", reason)
		}
	}
	return grouped || len(nacks) > 0
}

// nackKey groups the failures of a round: the delay before the retry (-1:
// the target's backoff) and the error kept as last_error.
type nackKey struct {
	delay time.Duration
	err   string
}

// rateLimiter spaces request starts evenly at rate per second (0: no
// limit), with a burst of one second's worth.
type rateLimiter struct {
	rate   int
	tokens float64
	last   time.Time
}

func (l *rateLimiter) setRate(rate int) {
	if rate != l.rate {
		l.rate, l.tokens, l.last = rate, float64(rate), time.Now()
	}
}

func (l *rateLimiter) refill() {
	now := time.Now()
	l.tokens = min(float64(l.rate), l.tokens+now.Sub(l.last).Seconds()*float64(l.rate))
	l.last = now
}

// allowance is how many requests may start now.
func (l *rateLimiter) allowance() int {
	if l.rate == 0 {
		return maxPushInFlight
	}
	l.refill()
	return int(l.tokens)
}

func (l *rateLimiter) take() {
	if l.rate > 0 {
		l.tokens--
	}
}

// untilNext is how long until the next request may start.
func (l *rateLimiter) untilNext() time.Duration {
	if l.rate == 0 || l.tokens >= 1 {
		return time.Hour
	}
	return time.Duration((1 - l.tokens) / float64(l.rate) * float64(time.Second))
}

// maxPushInFlight bounds push.max_in_flight (handlers validate it).
const maxPushInFlight = 1000

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
