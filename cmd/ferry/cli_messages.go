package main

import (
	"context"
	"flag"
	"time"

	"github.com/ferry-mq/ferry/client"
)

func queueSend(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	group := fs.String("group", "", "the message group (ordered delivery within it)")
	dedup := fs.String("dedup-id", "", "the dedup id (one BODY only)")
	delay := fs.Int("delay", 0, "seconds before the message can be received")
	at := attrs{}
	fs.Var(at, "attr", "an attribute, name=value (repeatable)")
	return func(ctx context.Context, args []string) error {
		msg := func(body string) client.SendMessage {
			return client.SendMessage{Body: jsonOrText(body), Attributes: at, Group: *group, DelaySeconds: optInt(fs, "delay", *delay)}
		}
		var sent []client.Sent
		send := func(bodies []string) error {
			ms := make([]client.SendMessage, len(bodies))
			for i, b := range bodies {
				ms[i] = msg(b)
			}
			if len(args) == 2 {
				ms[0].DedupID = *dedup
			}
			res, err := x.c.SendBatch(ctx, args[0], ms)
			sent = append(sent, res...)
			return err
		}
		var err error
		if len(args) == 2 {
			err = send(args[1:])
		} else if *dedup != "" {
			return usagef("--dedup-id names one message: give BODY")
		} else {
			err = stdinLines(x.in, send)
		}
		if err != nil {
			return err
		}
		return x.show(sent, "ID\tDUPLICATE", func(add func(...any)) {
			for _, s := range sent {
				add(s.ID, s.Duplicate)
			}
		})
	}
}

func queueReceive(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	maxN := fs.Int("max", 1, "the most messages to claim (1 to 100)")
	wait := fs.Int("wait", 0, "seconds to wait for a message when none is available (0 to 20; default: the queue's receive_wait_seconds)")
	vis := fs.Int("visibility-timeout", 0, "seconds the claim lasts (default: the queue's)")
	ack := fs.Bool("ack", false, "ack the messages once shown")
	return func(ctx context.Context, args []string) error {
		r := client.Receive{MaxMessages: *maxN, WaitSeconds: *wait, VisibilityTimeoutSeconds: *vis, NoWait: setFlag(fs, "wait") && *wait == 0}
		ms, err := x.c.Receive(ctx, args[0], r)
		if err != nil {
			return err
		}
		err = x.show(ms, "ID\tRECEIVES\tBODY\tATTRIBUTES\tRECEIPT", func(add func(...any)) {
			for _, m := range ms {
				add(m.ID, m.ReceiveCount, m.Body, m.Attributes, m.Receipt)
			}
		})
		if err != nil || !*ack || len(ms) == 0 {
			return err
		}
		receipts := make([]string, len(ms))
		for i, m := range ms {
			receipts[i] = m.Receipt
		}
		_, err = x.c.Ack(ctx, args[0], receipts...)
		return err
	}
}

func deadLettersLs(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	limit := fs.Int("limit", 100, "the most to list")
	return func(ctx context.Context, args []string) error {
		p, err := x.c.ListDeadLetters(ctx, args[0], client.Page{Limit: *limit})
		if err != nil {
			return err
		}
		return x.show(p.Messages, "ID\tRECEIVES\tLAST_ERROR\tBODY\tDEAD_LETTERED_AT", func(add func(...any)) {
			for _, m := range p.Messages {
				add(m.ID, m.ReceiveCount, m.LastError, m.Body, m.DeadLetteredAt.Format("2006-01-02T15:04:05Z07:00"))
			}
		})
	}
}

func deadLettersRedrive(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	var ids list
	fs.Var(&ids, "id", "a dead letter to move back (repeatable)")
	limit := fs.Int("limit", 0, "move back the oldest N")
	return func(ctx context.Context, args []string) error {
		if (len(ids) == 0) == (*limit == 0) {
			return usagef("give --id (one or more) or --limit, not both")
		}
		n, err := x.c.RedriveDeadLetters(ctx, args[0], client.Redrive{IDs: ids, Limit: *limit})
		if err != nil {
			return err
		}
		return x.fields(map[string]int64{"redriven": n}, "redriven", n)
	}
}

func deadLettersPurge(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.PurgeDeadLetters(ctx, args[0]); err != nil {
			return err
		}
		return x.done("purged the dead letters of %s", args[0])
	}
}

// peekFlags are the flags of queue peek and sub peek.
func peekFlags(fs *flag.FlagSet) func() client.PeekOptions {
	state := fs.String("state", "", "only the messages in this state: available, in_flight or delayed")
	limit := fs.Int("limit", 100, "the most to show (1 to 1000)")
	return func() client.PeekOptions { return client.PeekOptions{Limit: *limit, State: *state} }
}

func queuePeek(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	opts := peekFlags(fs)
	return func(ctx context.Context, args []string) error {
		p, err := x.c.PeekMessages(ctx, args[0], opts())
		if err != nil {
			return err
		}
		return x.show(p.Messages, "ID\tSTATE\tRECEIVES\tBODY\tATTRIBUTES\tVISIBLE_AT", func(add func(...any)) {
			for _, m := range p.Messages {
				add(m.ID, m.State, m.ReceiveCount, m.Body, m.Attributes, m.VisibleAt.Format(time.RFC3339))
			}
		})
	}
}
