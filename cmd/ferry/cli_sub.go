package main

import (
	"context"
	"flag"
	"time"

	"github.com/ferry-mq/ferry/client"
)

func subCommands() []command {
	return []command{
		{path: "sub ls", args: "TOPIC", help: "list a topic's subscriptions with their stats", nargs: [2]int{1, 1}, setup: subLs},
		{path: "sub get", args: "TOPIC SUB", help: "show a subscription's settings and stats", nargs: [2]int{2, 2}, setup: subGet},
		{path: "sub create", args: "TOPIC SUB", help: "create a subscription, or change the settings given", nargs: [2]int{2, 2}, setup: subCreate},
		{path: "sub delete", args: "TOPIC SUB", help: "delete a subscription", nargs: [2]int{2, 2}, setup: subDelete},
		{path: "sub receive", args: "TOPIC SUB", help: "receive (claim) events; --ack acks them", nargs: [2]int{2, 2}, setup: subReceive},
		{path: "sub peek", args: "TOPIC SUB", help: "show deliveries without claiming them (--state, --limit)", nargs: [2]int{2, 2}, setup: subPeek},
		{path: "sub seek", args: "TOPIC SUB", help: "redeliver or skip: --to earliest|latest|TIME", nargs: [2]int{2, 2}, setup: subSeek},
		{path: "sub purge", args: "TOPIC SUB", help: "drop every delivery waiting or in flight (dead letters kept)", nargs: [2]int{2, 2}, setup: subPurge},
	}
}

func subLs(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		all, err := client.All[client.Subscription](ctx, client.Page{Limit: 1000}, func(ctx context.Context, p client.Page) (*client.SubscriptionList, error) {
			return x.c.ListSubscriptions(ctx, args[0], p)
		})
		if err != nil {
			return err
		}
		return x.show(all, "NAME\tAVAILABLE\tIN_FLIGHT\tDELAYED\tDEAD_LETTERS\tPUSH", func(add func(...any)) {
			for _, s := range all {
				add(s.Name, s.Stats.Available, s.Stats.InFlight, s.Stats.Delayed, s.Stats.DeadLetters, pushURL(s.Push))
			}
		})
	}
}

func pushURL(p *client.Push) string {
	if p == nil {
		return "-"
	}
	return p.URL
}

func (x *cli) showSub(s *client.Subscription) error {
	var types []string
	if s.Filter != nil {
		types = s.Filter.Types
	}
	return x.fields(s, "name", s.Name, "topic", s.Topic, "types", types, "ordered", s.Ordered,
		"visibility_timeout_seconds", s.VisibilityTimeoutSeconds, "max_receives", s.MaxReceives,
		"dead_letter_queue", s.DeadLetterQueue, "push", pushURL(s.Push), "available", s.Stats.Available,
		"in_flight", s.Stats.InFlight, "dead_letters", s.Stats.DeadLetters)
}

func subGet(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		s, err := x.c.GetSubscription(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return x.showSub(s)
	}
}

func subCreate(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	var types list
	fs.Var(&types, "type", "an event type pattern to receive (repeatable; * one word, # any)")
	ordered := fs.Bool("ordered", false, "deliver events of one key one at a time, in order")
	start := fs.String("start", "", "where a new subscription begins: latest, earliest or a time")
	vis := fs.Int("visibility-timeout", 0, "seconds a received event stays hidden")
	maxRecv := fs.Int("max-receives", 0, "receives before an event is dead-lettered")
	pushTo := fs.String("push-url", "", "push the events to this URL (webhooks)")
	return func(ctx context.Context, args []string) error {
		cfg := client.SubscriptionConfig{Start: *start, VisibilityTimeoutSeconds: optInt(fs, "visibility-timeout", *vis),
			MaxReceives: optInt(fs, "max-receives", *maxRecv)}
		if len(types) > 0 {
			cfg.Filter = &client.Filter{Types: types}
		}
		if setFlag(fs, "ordered") {
			cfg.Ordered = ordered
		}
		if *pushTo != "" {
			cfg.Push = &client.PushConfig{URL: *pushTo}
		}
		s, _, err := x.c.PutSubscription(ctx, args[0], args[1], cfg)
		if err != nil {
			return err
		}
		if s.SigningSecret != "" && x.output == "table" {
			_ = x.done("signing secret (shown once): %s", s.SigningSecret)
		}
		return x.showSub(s)
	}
}

func subDelete(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.DeleteSubscription(ctx, args[0], args[1]); err != nil {
			return err
		}
		return x.done("deleted subscription %s/%s", args[0], args[1])
	}
}

func subReceive(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	maxN := fs.Int("max", 1, "the most events to claim (1 to 100)")
	wait := fs.Int("wait", 0, "seconds to wait for an event when none is available (0 to 20)")
	ack := fs.Bool("ack", false, "ack the events once shown")
	return func(ctx context.Context, args []string) error {
		ds, err := x.c.ReceiveEvents(ctx, args[0], args[1], client.Receive{MaxMessages: *maxN, WaitSeconds: *wait})
		if err != nil {
			return err
		}
		err = x.show(ds, "ID\tRECEIVES\tTYPE\tKEY\tDATA\tRECEIPT", func(add func(...any)) {
			for _, d := range ds {
				add(d.ID, d.ReceiveCount, d.Event.Type, d.Event.Key, d.Event.Data, d.Receipt)
			}
		})
		if err != nil || !*ack || len(ds) == 0 {
			return err
		}
		receipts := make([]string, len(ds))
		for i, d := range ds {
			receipts[i] = d.Receipt
		}
		_, err = x.c.AckEvents(ctx, args[0], args[1], receipts...)
		return err
	}
}

func subSeek(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	to := fs.String("to", "", "earliest, latest or an RFC 3339 time")
	return func(ctx context.Context, args []string) error {
		if *to == "" {
			return usagef("give --to")
		}
		if err := x.c.SeekSubscription(ctx, args[0], args[1], *to); err != nil {
			return err
		}
		return x.done("moved subscription %s/%s", args[0], args[1])
	}
}

func subPurge(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.PurgeSubscription(ctx, args[0], args[1]); err != nil {
			return err
		}
		return x.done("purged subscription %s/%s", args[0], args[1])
	}
}

func subPeek(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	opts := peekFlags(fs)
	return func(ctx context.Context, args []string) error {
		p, err := x.c.PeekSubscription(ctx, args[0], args[1], opts())
		if err != nil {
			return err
		}
		return x.show(p.Messages, "ID\tSTATE\tRECEIVES\tTYPE\tKEY\tDATA\tVISIBLE_AT", func(add func(...any)) {
			for _, d := range p.Messages {
				add(d.ID, d.State, d.ReceiveCount, d.Event.Type, d.Event.Key, d.Event.Data, d.VisibleAt.Format(time.RFC3339))
			}
		})
	}
}
