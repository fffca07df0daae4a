package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ferry-mq/ferry/client"
)

// setFlag reports whether the flag name was given on the command line.
func setFlag(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// optInt is &v when the flag name was given, else nil (left out).
func optInt(fs *flag.FlagSet, name string, v int) *int {
	if !setFlag(fs, name) {
		return nil
	}
	return &v
}

// attrs is a repeatable name=value flag.
type attrs map[string]string

func (a attrs) String() string { return cell(map[string]string(a)) }

func (a attrs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	a[k] = v
	return nil
}

// list is a repeatable flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// jsonOrText is s as JSON when it is valid JSON, else as a JSON string.
func jsonOrText(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// stdinLines calls batch with the non-empty lines of r, at most 1000 at a
// time (the most one request takes).
func stdinLines(r io.Reader, batch func([]string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines []string
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
		if len(lines) == 1000 {
			if err := batch(lines); err != nil {
				return err
			}
			lines = nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if len(lines) > 0 {
		return batch(lines)
	}
	return nil
}

func queueCommands() []command {
	return []command{
		{path: "queue ls", help: "list the queues with their stats", nargs: [2]int{0, 0}, setup: queueLs},
		{path: "queue get", args: "QUEUE", help: "show a queue's settings and stats", nargs: [2]int{1, 1}, setup: queueGet},
		{path: "queue create", args: "QUEUE", help: "create a queue, or change the settings given", nargs: [2]int{1, 1}, setup: queueCreate},
		{path: "queue delete", args: "QUEUE", help: "delete a queue with its messages", nargs: [2]int{1, 1}, setup: queueDelete},
		{path: "queue send", args: "QUEUE [BODY]", help: "send BODY, or one message per line of stdin", nargs: [2]int{1, 2}, setup: queueSend},
		{path: "queue receive", args: "QUEUE", help: "receive (claim) messages; --ack acks them", nargs: [2]int{1, 1}, setup: queueReceive},
		{path: "queue peek", args: "QUEUE", help: "show messages without claiming them (--state, --limit)", nargs: [2]int{1, 1}, setup: queuePeek},
		{path: "queue purge", args: "QUEUE", help: "drop every message (dead letters kept)", nargs: [2]int{1, 1}, setup: queuePurge},
		{path: "queue dead-letters ls", args: "QUEUE", help: "list a queue's dead letters", nargs: [2]int{1, 1}, setup: deadLettersLs},
		{path: "queue dead-letters redrive", args: "QUEUE", help: "move dead letters back (--id, or --limit)", nargs: [2]int{1, 1}, setup: deadLettersRedrive},
		{path: "queue dead-letters purge", args: "QUEUE", help: "delete a queue's dead letters", nargs: [2]int{1, 1}, setup: deadLettersPurge},
	}
}

func queueLs(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		all, err := client.All[client.Queue](ctx, client.Page{Limit: 1000}, x.c.ListQueues)
		if err != nil {
			return err
		}
		return x.show(all, "NAME\tAVAILABLE\tIN_FLIGHT\tDELAYED\tDEAD_LETTERS\tOLDEST_AGE_S", func(add func(...any)) {
			for _, q := range all {
				s := q.Stats
				add(q.Name, s.Available, s.InFlight, s.Delayed, s.DeadLetters, s.OldestAgeSeconds)
			}
		})
	}
}

// showQueue shows one queue as FIELD VALUE rows.
func (x *cli) showQueue(q *client.Queue) error {
	push := "-"
	if q.Push != nil {
		push = q.Push.URL
	}
	return x.fields(q, "name", q.Name, "visibility_timeout_seconds", q.VisibilityTimeoutSeconds,
		"max_receives", q.MaxReceives, "retention_seconds", q.RetentionSeconds, "delay_seconds", q.DelaySeconds,
		"dedup_window_seconds", q.DedupWindowSeconds, "max_depth", q.MaxDepth,
		"retry_seconds", fmt.Sprintf("%d..%d", q.RetryMinSeconds, q.RetryMaxSeconds),
		"dead_letter_queue", q.DeadLetterQueue, "push", push, "available", q.Stats.Available,
		"in_flight", q.Stats.InFlight, "delayed", q.Stats.Delayed, "dead_letters", q.Stats.DeadLetters,
		"oldest_age_seconds", q.Stats.OldestAgeSeconds)
}

func queueGet(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		q, err := x.c.GetQueue(ctx, args[0])
		if err != nil {
			return err
		}
		return x.showQueue(q)
	}
}

func queueCreate(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	vis := fs.Int("visibility-timeout", 0, "seconds a received message stays hidden")
	maxRecv := fs.Int("max-receives", 0, "receives before a message is dead-lettered")
	ret := fs.Int("retention", 0, "seconds a message is kept")
	delay := fs.Int("delay", 0, "seconds every new message is delayed")
	dedup := fs.Int("dedup-window", 0, "seconds a dedup_id is remembered")
	depth := fs.Int("max-depth", 0, "the most messages the queue holds")
	rmin := fs.Int("retry-min", 0, "the first nack backoff, seconds")
	rmax := fs.Int("retry-max", 0, "the largest nack backoff, seconds")
	dlq := fs.String("dead-letter-queue", "", "the queue that takes the dead letters (\"\" with the flag given: none)")
	return func(ctx context.Context, args []string) error {
		cfg := client.QueueConfig{
			VisibilityTimeoutSeconds: optInt(fs, "visibility-timeout", *vis), MaxReceives: optInt(fs, "max-receives", *maxRecv),
			RetentionSeconds: optInt(fs, "retention", *ret), DelaySeconds: optInt(fs, "delay", *delay),
			DedupWindowSeconds: optInt(fs, "dedup-window", *dedup),
			RetryMinSeconds:    optInt(fs, "retry-min", *rmin), RetryMaxSeconds: optInt(fs, "retry-max", *rmax),
		}
		if setFlag(fs, "max-depth") {
			cfg.MaxDepth = client.Ptr(int64(*depth))
		}
		if setFlag(fs, "dead-letter-queue") {
			cfg.DeadLetterQueue = dlq
		}
		q, _, err := x.c.PutQueue(ctx, args[0], cfg)
		if err != nil {
			return err
		}
		return x.showQueue(q)
	}
}

func queueDelete(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.DeleteQueue(ctx, args[0]); err != nil {
			return err
		}
		return x.done("deleted queue %s", args[0])
	}
}

func queuePurge(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.PurgeQueue(ctx, args[0]); err != nil {
			return err
		}
		return x.done("purged queue %s", args[0])
	}
}
