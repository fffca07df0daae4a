package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"

	"github.com/ferry-mq/ferry/client"
)

// inventoryConsumer reserves stock: a REST consumer of the ordered
// inventory subscription. Ordered by key (the order id), it must see each
// order's created before its shipped, also when it nacks deliveries.
type inventoryConsumer struct {
	lab *Lab

	mu         sync.Mutex
	seen       map[string][]string // order id → event types, in the order processed
	deliveries int
	nacked     int
	outOfOrder int
}

func (c *inventoryConsumer) run(ctx context.Context) error {
	for ctx.Err() == nil {
		got, err := c.lab.client.ReceiveEvents(ctx, c.lab.topic, "inventory", client.Receive{MaxMessages: 10, WaitSeconds: 1})
		if err != nil {
			return ignoreCanceled(ctx, err)
		}
		var ack, nack []string
		for _, m := range got {
			key := ""
			if m.Event.Key != nil {
				key = *m.Event.Key
			}
			c.mu.Lock()
			c.deliveries++
			if c.lab.cfg.Faults && c.deliveries%6 == 0 {
				c.nacked++ // the warehouse did not answer: try again later
				nack = append(nack, m.Receipt)
				c.mu.Unlock()
				continue
			}
			types := c.seen[key]
			if len(types) > 0 && types[len(types)-1] == m.Event.Type {
				c.mu.Unlock() // redelivered after an ack that did not reach Ferry
				ack = append(ack, m.Receipt)
				continue
			}
			if m.Event.Type == "order.shipped" && len(types) == 0 {
				c.outOfOrder++
			}
			c.seen[key] = append(types, m.Event.Type)
			c.mu.Unlock()
			ack = append(ack, m.Receipt)
		}
		if len(ack) > 0 {
			if _, err := c.lab.client.AckEvents(ctx, c.lab.topic, "inventory", ack...); err != nil {
				return ignoreCanceled(ctx, err)
			}
		}
		if len(nack) > 0 {
			if _, err := c.lab.client.NackEvents(ctx, c.lab.topic, "inventory", client.Nack{DelaySeconds: client.Ptr(0)}, nack...); err != nil {
				return ignoreCanceled(ctx, err)
			}
		}
	}
	return ctx.Err()
}

// complete reports whether every order saw created then shipped.
func (c *inventoryConsumer) complete(orders []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range orders {
		if fmt.Sprint(c.seen[id]) != "[order.created order.shipped]" {
			return false
		}
	}
	return true
}

// analyticsGroup counts events: a consumer group that replays the topic
// from earliest. Its first member leaves halfway (a deploy), and a second
// one takes over from the committed offsets.
type analyticsGroup struct {
	lab *Lab

	mu         sync.Mutex
	seen       map[string]bool
	deliveries int
	handovers  int
}

func (g *analyticsGroup) run(ctx context.Context) error {
	c, topic := g.lab.client, g.lab.topic
	member := "analytics-1"
	half := g.lab.cfg.Orders // events, about half of what the orders publish
	for ctx.Err() == nil {
		poll, err := c.PollGroup(ctx, topic, "analytics", client.Poll{Consumer: member, MaxEvents: 20, WaitSeconds: 1, Start: "earliest"})
		if err != nil {
			return ignoreCanceled(ctx, err)
		}
		offsets := map[int]int64{}
		g.mu.Lock()
		for _, e := range poll.Events {
			g.deliveries++
			g.seen[e.ID] = true
			offsets[e.Partition] = e.Offset
		}
		leave := g.lab.cfg.Faults && g.handovers == 0 && len(g.seen) >= half
		g.mu.Unlock()
		if len(offsets) > 0 {
			if err := c.CommitGroup(ctx, topic, "analytics", member, poll.Generation, offsets); err != nil {
				return ignoreCanceled(ctx, err)
			}
		}
		if leave {
			if err := c.LeaveGroup(ctx, topic, "analytics", member); err != nil {
				return ignoreCanceled(ctx, err)
			}
			g.mu.Lock()
			g.handovers++
			g.mu.Unlock()
			member = "analytics-2"
		}
	}
	return ctx.Err()
}

func (g *analyticsGroup) unique() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

func ignoreCanceled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Report is what each part of the lab saw.
type Report struct {
	Rows []ReportRow
}

// ReportRow is one consumer's line of the report.
type ReportRow struct {
	Consumer, How     string
	Expected, Effects int
	Deliveries        int
	Faults            string
	OK                bool
}

func (l *Lab) report(ctx context.Context) *Report {
	o, p, e, inv, a := l.orders, l.payment, l.email, l.inventory, l.analytics
	want := len(o.committed)
	charged, _ := p.charges(ctx)
	r := &Report{}
	r.Rows = append(r.Rows, ReportRow{
		Consumer: "orders", How: "SQL: INSERT + ferry.publish, one transaction", Expected: want, Effects: want,
		Deliveries: want + o.retried,
		Faults:     fmt.Sprintf("%d rolled back, %d commits retried (%d duplicates answered)", len(o.rolledBack), o.retried, o.duplicates),
		OK:         o.duplicates == o.retried && l.leaks(ctx) == 0,
	})
	p.mu.Lock()
	r.Rows = append(r.Rows, ReportRow{
		Consumer: "payment", How: "SQL: ferry.receive, charge + ferry.ack, one transaction", Expected: want, Effects: charged,
		Deliveries: p.delivered,
		Faults:     fmt.Sprintf("%d crashes before commit, poison nacked %d×, redriven %d", p.crashes, p.nacked, p.redriven),
		OK:         charged == want && p.conflicts == 0,
	})
	p.mu.Unlock()
	e.mu.Lock()
	r.Rows = append(r.Rows, ReportRow{
		Consumer: "email", How: "push webhook, signature checked, dedup on webhook-id", Expected: want, Effects: len(e.sent),
		Deliveries: e.deliveries,
		Faults:     fmt.Sprintf("%d attempts failed (503), %d bad signatures", e.failed, e.badSig),
		OK:         len(e.sent) == want && e.badSig == 0,
	})
	e.mu.Unlock()
	inv.mu.Lock()
	inOrder := 0
	for _, id := range o.committed {
		if fmt.Sprint(inv.seen[id]) == "[order.created order.shipped]" {
			inOrder++
		}
	}
	r.Rows = append(r.Rows, ReportRow{
		Consumer: "inventory", How: "REST, ordered subscription keyed by order", Expected: want, Effects: inOrder,
		Deliveries: inv.deliveries,
		Faults:     fmt.Sprintf("%d nacked, %d out of order", inv.nacked, inv.outOfOrder),
		OK:         inOrder == want && inv.outOfOrder == 0 && len(inv.seen) == want,
	})
	inv.mu.Unlock()
	a.mu.Lock()
	r.Rows = append(r.Rows, ReportRow{
		Consumer: "analytics", How: "REST consumer group from earliest", Expected: 2 * want, Effects: len(a.seen),
		Deliveries: a.deliveries,
		Faults:     fmt.Sprintf("%d member handover", a.handovers),
		OK:         len(a.seen) == 2*want,
	})
	a.mu.Unlock()
	return r
}

// leaks counts the rolled-back orders that some consumer saw anyway (none
// should: a rolled-back transaction publishes nothing).
func (l *Lab) leaks(ctx context.Context) int {
	n := 0
	for _, id := range l.orders.rolledBack {
		var charged bool
		_ = l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+l.table("charges")+` WHERE order_id = $1)`, id).Scan(&charged)
		l.email.mu.Lock()
		emailed := l.email.sent["order.created/"+id]
		l.email.mu.Unlock()
		l.inventory.mu.Lock()
		reserved := len(l.inventory.seen[id]) > 0
		l.inventory.mu.Unlock()
		l.analytics.mu.Lock()
		counted := l.analytics.seen["order.created/"+id]
		l.analytics.mu.Unlock()
		if charged || emailed || reserved || counted {
			n++
		}
	}
	return n
}

// OK reports whether every row is.
func (r *Report) OK() bool {
	for _, row := range r.Rows {
		if !row.OK {
			return false
		}
	}
	return len(r.Rows) > 0
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "consumer\thow\texpected\teffects\tdeliveries\tfaults injected\tok")
	for _, row := range r.Rows {
		ok := "yes"
		if !row.OK {
			ok = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", row.Consumer, row.How, row.Expected, row.Effects, row.Deliveries, row.Faults, ok)
	}
	_ = tw.Flush()
}

// String renders the report as JSON (for a test's log).
func (r *Report) String() string {
	b, _ := json.MarshalIndent(r, "", "  ")
	return string(b)
}
