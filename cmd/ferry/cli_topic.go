package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/ferry-mq/ferry/client"
)

func topicCommands() []command {
	return []command{
		{path: "topic ls", help: "list the topics", nargs: [2]int{0, 0}, setup: topicLs},
		{path: "topic get", args: "TOPIC", help: "show a topic's settings and partition offsets", nargs: [2]int{1, 1}, setup: topicGet},
		{path: "topic create", args: "TOPIC", help: "create a topic, or change the settings given", nargs: [2]int{1, 1}, setup: topicCreate},
		{path: "topic delete", args: "TOPIC", help: "delete a topic with its events", nargs: [2]int{1, 1}, setup: topicDelete},
		{path: "topic publish", args: "TOPIC [DATA]", help: "publish DATA (--type), or one event per line of stdin", nargs: [2]int{1, 2}, setup: topicPublish},
		{path: "topic tail", args: "TOPIC", help: "print the last events of each partition, then follow (like tail -f)", nargs: [2]int{1, 1}, setup: topicTail},
	}
}

func topicLs(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		all, err := client.All[client.Topic](ctx, client.Page{Limit: 1000}, x.c.ListTopics)
		if err != nil {
			return err
		}
		return x.show(all, "NAME\tPARTITIONS\tRETENTION_S\tEVENTS", func(add func(...any)) {
			for _, t := range all {
				add(t.Name, t.Partitions, t.RetentionSeconds, retained(t))
			}
		})
	}
}

// retained is how many events a topic keeps, over its partitions.
func retained(t client.Topic) int64 {
	n := int64(0)
	for _, o := range t.Offsets {
		n += o.HeadOffset + 1 - o.OldestOffset
	}
	return n
}

func (x *cli) showTopic(t *client.Topic) error {
	return x.show(t, "PARTITION\tOLDEST_OFFSET\tHEAD_OFFSET", func(add func(...any)) {
		for _, o := range t.Offsets {
			add(o.Partition, o.OldestOffset, o.HeadOffset)
		}
	})
}

func topicGet(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		t, err := x.c.GetTopic(ctx, args[0])
		if err != nil {
			return err
		}
		return x.showTopic(t)
	}
}

func topicCreate(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	parts := fs.Int("partitions", 0, "partitions (they may only grow)")
	ret := fs.Int("retention", 0, "seconds an event is kept")
	dedup := fs.Int("dedup-window", 0, "seconds an event id is remembered")
	return func(ctx context.Context, args []string) error {
		t, _, err := x.c.PutTopic(ctx, args[0], client.TopicConfig{
			Partitions: optInt(fs, "partitions", *parts), RetentionSeconds: optInt(fs, "retention", *ret),
			DedupWindowSeconds: optInt(fs, "dedup-window", *dedup),
		})
		if err != nil {
			return err
		}
		return x.showTopic(t)
	}
}

func topicDelete(_ *flag.FlagSet, x *cli) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := x.c.DeleteTopic(ctx, args[0]); err != nil {
			return err
		}
		return x.done("deleted topic %s", args[0])
	}
}

func topicPublish(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	typ := fs.String("type", "", "the events' type (without it, each stdin line is a whole event: {\"type\", \"key\", \"data\", ...})")
	key := fs.String("key", "", "the event's key (picks the partition)")
	id := fs.String("id", "", "the event's id (its dedup key; one DATA only)")
	at := attrs{}
	fs.Var(at, "attr", "an attribute, name=value (repeatable)")
	return func(ctx context.Context, args []string) error {
		event := func(line string) (client.PublishEvent, error) {
			if *typ != "" {
				return client.PublishEvent{Type: *typ, Key: *key, Data: jsonOrText(line), Attributes: at}, nil
			}
			var e client.PublishEvent
			if err := json.Unmarshal([]byte(line), &e); err != nil || e.Type == "" {
				return e, usagef("without --type each line is an event object with a type: %q", line)
			}
			return e, nil
		}
		var published []client.Published
		publish := func(lines []string) error {
			es := make([]client.PublishEvent, len(lines))
			for i, l := range lines {
				var err error
				if es[i], err = event(l); err != nil {
					return err
				}
			}
			if len(args) == 2 {
				es[0].ID = *id
			}
			res, err := x.c.Publish(ctx, args[0], es...)
			published = append(published, res...)
			return err
		}
		var err error
		switch {
		case len(args) == 2 && *typ == "":
			return usagef("give --type with DATA")
		case len(args) == 2:
			err = publish(args[1:])
		case *id != "":
			return usagef("--id names one event: give DATA")
		default:
			err = stdinLines(x.in, publish)
		}
		if err != nil {
			return err
		}
		return x.show(published, "ID\tPARTITION\tOFFSET\tDUPLICATE", func(add func(...any)) {
			for _, p := range published {
				add(p.ID, p.Partition, p.Offset, p.Duplicate)
			}
		})
	}
}

// topicTail prints each partition's last -n events, then follows every
// partition with long polls until interrupted (or, with --follow=false,
// returns). Events are printed as they come, one line each.
func topicTail(fs *flag.FlagSet, x *cli) func(context.Context, []string) error {
	last := fs.Int("n", 10, "events to show first from the end of each partition")
	follow := fs.Bool("follow", true, "keep printing new events until interrupted")
	return func(ctx context.Context, args []string) error {
		t, err := x.c.GetTopic(ctx, args[0])
		if err != nil {
			return err
		}
		if x.output == "table" {
			fmt.Fprintln(x.out, "PARTITION\tOFFSET\tID\tTYPE\tKEY\tDATA")
		}
		var mu sync.Mutex
		print := func(e client.Event) {
			mu.Lock()
			defer mu.Unlock()
			if x.output == "json" {
				b, _ := json.Marshal(e)
				fmt.Fprintln(x.out, string(b))
				return
			}
			fmt.Fprintf(x.out, "%d\t%d\t%s\t%s\t%s\t%s\n", e.Partition, e.Offset, e.ID, e.Type, cell(e.Key), e.Data)
		}
		errs := make(chan error, len(t.Offsets))
		for _, o := range t.Offsets {
			go func() { errs <- x.tailPartition(ctx, args[0], o, *last, *follow, print) }()
		}
		for range t.Offsets {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		if errors.Is(err, context.Canceled) {
			return nil // interrupted: the normal end of a follow
		}
		return err
	}
}

// tailPartition prints partition o's events from its last n on.
func (x *cli) tailPartition(ctx context.Context, topic string, o client.PartitionOffsets, n int, follow bool, print func(client.Event)) error {
	from := max(o.HeadOffset+1-int64(n), o.OldestOffset, 0)
	for {
		wait := 0
		if follow {
			wait = 20
		}
		p, err := x.c.ReadEvents(ctx, topic, client.ReadEvents{Partition: o.Partition, FromOffset: from, Limit: 1000, WaitSeconds: wait})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		for _, e := range p.Events {
			print(e)
		}
		from = p.NextOffset
		if !follow && len(p.Events) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
