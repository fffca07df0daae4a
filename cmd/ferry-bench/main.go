// Command ferry-bench measures Ferry side by side with raw SQL on the same
// schema, in one run, against one durable PostgreSQL database, and prints a
// markdown report (`make bench` writes it to docs/benchmarks.md).
//
// Unless -database-url (or FERRY_BENCH_DATABASE_URL) names a server, it
// starts a private durable cluster (fsync and synchronous_commit on) in a
// temporary directory on disk, and removes it at the end. On that server it
// creates a database, boots Ferry in-process on 127.0.0.1:0 (which applies
// the migrations), and opens a separate pool for the raw SQL side. Raw SQL
// writes the same columns into the same ferry.messages table, for queues
// created through the API, so triggers and indexes are identical (and, for
// topics, into ferry.topic_partitions and ferry.events).
//
// Each scenario runs on fresh queues after the tables are truncated and a
// CHECKPOINT, so scenarios do not affect each other; throughput scenarios
// run each side in several rounds in the order raw, Ferry, Ferry, raw, ...,
// so that drift and bursts of other load on a shared machine hit both sides
// alike (-rounds). Both sides always use the same concurrency and the same
// message bodies.
//
// Usage:
//
//	go run ./cmd/ferry-bench -out docs/benchmarks.md
//	go run ./cmd/ferry-bench -quick            # a ~1 minute smoke run
//	go run ./cmd/ferry-bench -only groups,fanout  # selected scenarios, by name (see -help) or number
//	go run ./cmd/ferry-bench -only held-snapshot -held-duration 30m  # issue 21's long run
//
// Scenario 15 (held snapshot) is opt-in: a full run leaves it out, since
// it takes an hour at its default -held-duration. Scenario 16 (river)
// runs River, the peer a Go team would pick instead, in the same database.
//
// Scenario 11 (cold start) runs on databases of its own, each with its own
// in-process server: a new install used lightly and then given a backlog,
// against one that saw the backlog (analysed) before its server started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options are the command-line settings.
type Options struct {
	DatabaseURL string
	DataDir     string
	Out         string
	Quick       bool
	Only        map[int]bool
	CPUProfile  string

	SendWorkers    int           // Ferry's SendWorkers
	Duration       time.Duration // per side, for each throughput scenario
	Rounds         int           // rounds per side of each throughput scenario
	Churn          time.Duration
	Prefill        int // messages per run of the receive+ack scenario
	SmallDepth     int
	LargeDepth     int
	ClaimIters     int
	WakeIters      int
	ChurnDepth     int
	StatementsMsgs int

	// Scenario 11 (cold start): the light use's length, each
	// measurement's time budget, and the backlog's sizes.
	ColdLight, ColdBudget    time.Duration
	ColdMessages, ColdEvents int

	// Scenario 15 (held snapshot, opt-in): each run's length, the offered
	// rate, the starting backlog and the flows measured.
	HeldDuration time.Duration
	HeldRate     int
	HeldBacklog  int
	HeldFlows    map[string]bool
}

func parseFlags() (Options, error) {
	var (
		o         Options
		only      string
		heldFlows string
	)
	flag.StringVar(&o.DatabaseURL, "database-url", os.Getenv("FERRY_BENCH_DATABASE_URL"),
		"superuser URL of an existing PostgreSQL server (default $FERRY_BENCH_DATABASE_URL; empty: start a private durable cluster); the bench creates and drops a database of its own there")
	flag.StringVar(&o.DataDir, "data-dir", os.TempDir(), "parent directory of the private cluster's temporary data directory (must be a real disk, not tmpfs)")
	flag.StringVar(&o.Out, "out", "", "also write the markdown report to this file")
	flag.BoolVar(&o.Quick, "quick", false, "smoke run: ~2 s per side, fewer iterations, 200k instead of 1M messages; cold start: 5 s of light use, 50k messages and 25k events, 20 s budgets")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run, by name or number (default all): "+scenarioNames(scenarios()))
	flag.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (load-generator goroutines carry the pprof label role=client)")
	flag.IntVar(&o.SendWorkers, "send-workers", 4, "Ferry's SendWorkers (group-commit transactions in flight); shown in the report header")
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per side of each throughput scenario")
	flag.IntVar(&o.Rounds, "rounds", 4, "rounds per side that -duration is split into (alternating raw and Ferry)")
	flag.DurationVar(&o.Churn, "churn", 30*time.Second, "duration of each side of the churn scenario")
	flag.IntVar(&o.Prefill, "prefill", 300_000, "messages prefilled before each run of the receive+ack scenario")
	flag.IntVar(&o.SmallDepth, "small", 10_000, "queue depth of the small claim-latency measurement")
	flag.IntVar(&o.LargeDepth, "large", 1_000_000, "queue depth of the large claim-latency measurement")
	flag.IntVar(&o.ClaimIters, "claim-iterations", 1000, "receive+ack round trips per side and depth in the claim-latency scenario")
	flag.IntVar(&o.WakeIters, "wake-iterations", 200, "messages per variant of the long-poll wake scenario")
	flag.IntVar(&o.ChurnDepth, "churn-depth", 100_000, "steady queue depth of the churn scenario")
	flag.IntVar(&o.StatementsMsgs, "statements-messages", 2000, "messages per phase of the statements-per-message scenario")
	flag.DurationVar(&o.ColdLight, "cold-light", time.Minute, "cold start: how long the fresh server is used lightly before the backlog")
	flag.DurationVar(&o.ColdBudget, "cold-budget", time.Minute, "cold start: time budget of each latency measurement (a cliff is cut there and flagged)")
	flag.IntVar(&o.ColdMessages, "cold-messages", 200_000, "cold start: messages of the queue backlog (a multiple of 1000)")
	flag.IntVar(&o.ColdEvents, "cold-events", 100_000, "cold start: events of the topic backlog (a multiple of 1000)")
	flag.DurationVar(&o.HeldDuration, "held-duration", 10*time.Minute, "held snapshot (opt-in): length of each run, with and without the snapshot (issue 21: 10m, and 30m for the long run)")
	flag.IntVar(&o.HeldRate, "held-rate", 1000, "held snapshot: offered rate, messages (events) per second, a multiple of 100")
	flag.IntVar(&o.HeldBacklog, "held-backlog", 20_000, "held snapshot: backlog each run starts from")
	flag.StringVar(&heldFlows, "held-flows", "queue,subscription,group", "held snapshot: the flows to run, comma-separated")
	flag.Parse()

	if o.Quick {
		if err := quickDefaults(); err != nil {
			return o, err
		}
	}
	var err error
	if only != "" {
		if o.Only, err = parseOnly(only, scenarios()); err != nil {
			return o, err
		}
	}
	if o.Rounds < 1 || o.Duration/time.Duration(o.Rounds) < 500*time.Millisecond || o.Churn < time.Second {
		return o, errors.New("-rounds must be at least 1, -duration / -rounds at least 500ms and -churn at least 1s")
	}
	if o.ColdMessages < coldBatch || o.ColdMessages%coldBatch != 0 || o.ColdEvents < coldBatch || o.ColdEvents%coldBatch != 0 {
		return o, fmt.Errorf("-cold-messages and -cold-events must be positive multiples of %d", coldBatch)
	}
	if o.HeldFlows, err = parseHeldFlows(heldFlows); err != nil {
		return o, err
	}
	if o.HeldDuration < 10*time.Second || o.HeldRate < 100 || o.HeldRate%100 != 0 || o.HeldBacklog < 0 {
		return o, errors.New("-held-duration must be at least 10s, -held-rate a positive multiple of 100 and -held-backlog not negative")
	}
	if o.ColdBudget < time.Second || o.ColdLight < 0 {
		return o, errors.New("-cold-budget must be at least 1s and -cold-light not negative")
	}
	return o, nil
}

// quickDefaults sets the -quick run's values of the flags not given on
// the command line.
func quickDefaults() error {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, d := range [][2]string{
		{"duration", "2s"}, {"rounds", "2"}, {"churn", "4s"}, {"prefill", "100000"}, {"large", "200000"},
		{"claim-iterations", "200"}, {"wake-iterations", "40"}, {"churn-depth", "20000"}, {"statements-messages", "500"},
		{"cold-light", "5s"}, {"cold-budget", "20s"}, {"cold-messages", "50000"}, {"cold-events", "25000"},
		{"held-duration", "30s"}, {"held-backlog", "5000"},
	} {
		if !set[d[0]] {
			if err := flag.Set(d[0], d[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// scenario is one section of the report.
type scenario struct {
	name  string // what -only calls it
	title string
	run   func(b *Bench, ctx context.Context) (*Section, error)
	// optIn scenarios run only when -only names them.
	optIn bool
}

// scenarios are the report's sections, in their order; a scenario's
// number is its position from 1.
func scenarios() []scenario {
	return []scenario{
		{"batch-send", "Batch send", (*Bench).batchSend, false},
		{"single-send", "Single-message send", (*Bench).singleSend, false},
		{"receive-ack", "Receive + ack", (*Bench).receiveAck, false},
		{"wake", "Long-poll wake latency", (*Bench).wakeLatency, false},
		{"claim", "Claim latency vs backlog", (*Bench).claimLatency, false},
		{"churn", "Table and index size under churn", (*Bench).churn, false},
		{"statements", "SQL statements per message", (*Bench).statements, false},
		{"publish", "Topic publish", (*Bench).topicPublish, false},
		{"fanout", "Topic fan-out and push delivery", (*Bench).fanout, false},
		{"groups", "Consumer groups", (*Bench).groups, false},
		{"coldstart", "Cold start", (*Bench).coldStart, false},
		{"leave", "Consumer group leave: takeover after a graceful leave and after a crash", (*Bench).leaveRebalance, false},
		{"sql-api", "SQL API inside an application transaction", (*Bench).sqlAPI, false},
		{"sqs", "SQS face against REST: send, receive and delete batches of 10", (*Bench).sqsFace, false},
		{"held-snapshot", "Behind a held snapshot (issue 21)", (*Bench).heldSnapshot, true},
		{"river", "River as a peer: InsertMany and no-op workers against Ferry's send and receive+ack", (*Bench).riverPeer, false},
	}
}

// scenarioNames lists the scenarios as "1 batch-send, 2 single-send, ...".
func scenarioNames(all []scenario) string {
	names := make([]string, len(all))
	for i, sc := range all {
		names[i] = fmt.Sprintf("%d %s", i+1, sc.name)
		if sc.optIn {
			names[i] += " (opt-in)"
		}
	}
	return strings.Join(names, ", ")
}

// parseOnly reads -only: scenario names or numbers, comma-separated. It
// returns the numbers chosen.
func parseOnly(only string, all []scenario) (map[int]bool, error) {
	chosen := map[int]bool{}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		n, err := strconv.Atoi(s)
		if err != nil {
			n = slices.IndexFunc(all, func(sc scenario) bool { return sc.name == s }) + 1
		}
		if n < 1 || n > len(all) {
			return nil, fmt.Errorf("-only: %q is not a scenario (%s)", s, scenarioNames(all))
		}
		chosen[n] = true
	}
	return chosen, nil
}

// chosen says whether scenario n runs: every one but the opt-in ones
// when -only is not given, else those it names.
func chosen(only map[int]bool, n int, sc scenario) bool {
	if only == nil {
		return !sc.optIn
	}
	return only[n]
}

func main() {
	opts, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		os.Exit(1)
	}
}

func run(opts Options) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if opts.CPUProfile != "" {
		f, err := os.Create(opts.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}

	begin := time.Now()
	b, err := Setup(ctx, opts, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	rep := &Report{Header: b.header}
	// broken is a correctness failure seen under load (a broken offset
	// invariant): the report is still written, then the run fails.
	var broken error
	for i, sc := range scenarios() {
		n := i + 1
		if !chosen(opts.Only, n, sc) {
			continue
		}
		progress("scenario %d: %s", n, sc.title)
		started := time.Now()
		sec, err := sc.run(b, ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			sec = &Section{Notes: []string{fmt.Sprintf("**Failed:** %v", err)}}
			progress("scenario %d failed: %v", n, err)
			if de := (*densityError)(nil); errors.As(err, &de) && broken == nil {
				broken = fmt.Errorf("scenario %d: %w", n, err)
			}
		}
		sec.Number, sec.Title = n, sc.title
		rep.Sections = append(rep.Sections, sec)
		progress("scenario %d done in %s", n, time.Since(started).Round(100*time.Millisecond))
	}
	rep.Took = time.Since(begin)

	md := rep.Markdown()
	fmt.Print(md)
	if opts.Out != "" {
		if err := os.MkdirAll(filepath.Dir(opts.Out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(opts.Out, []byte(md), 0o644); err != nil {
			return err
		}
		progress("report written to %s", opts.Out)
	}
	return broken
}

// progress prints a timestamped line to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s ferry-bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
