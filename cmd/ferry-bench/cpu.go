package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of the times in /proc (USER_HZ, 100 on every Linux
// build that matters).
const clockTick = 10 * time.Millisecond

// CPUMeter tells how much CPU this process (Ferry and the load generator
// share it), the PostgreSQL server and the whole machine used over a phase.
// It reads /proc, so it works on Linux only; elsewhere the figures are zero.
type CPUMeter struct {
	// postmaster is the PID of the private cluster's postmaster, or 0 when
	// the server is not ours (then PostgreSQL's share is unknown).
	postmaster int
}

// CPUSample is a reading of the CPU clocks.
type CPUSample struct {
	at   time.Time
	self time.Duration
	pg   time.Duration
	busy time.Duration // all CPUs, all processes, not idle
	irq  time.Duration // of busy: interrupt and softirq time (network)
}

// CPUUsage is the CPU used between two samples, in cores (CPU seconds per
// wall second). Other is everything else the machine did: other tenants,
// kernel threads, and interrupt time (IRQ), which includes the loopback
// network traffic of the bench itself.
type CPUUsage struct {
	Self, PG, Other, IRQ float64
	PGKnown              bool
	// Client is the part of Self the load generator used, from a CPU
	// profile of the window (clientShare); ClientKnown says it was taken.
	Client      float64
	ClientKnown bool
}

// Server is the part of Self that Ferry's server used: the bench process
// less the load generator.
func (u CPUUsage) Server() float64 { return max(0, u.Self-u.Client) }

// NewCPUMeter makes a meter; dataDir is the private cluster's data
// directory, or "" for a server that is not ours.
func NewCPUMeter(dataDir string) *CPUMeter {
	m := &CPUMeter{}
	if dataDir == "" {
		return m
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(b), "\n")
	m.postmaster, _ = strconv.Atoi(strings.TrimSpace(line))
	return m
}

// Sample reads the clocks now.
func (m *CPUMeter) Sample() CPUSample {
	s := CPUSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if m.postmaster > 0 {
		s.pg = m.postgresCPU()
	}
	s.busy, s.irq = machineBusy()
	return s
}

// Since is the usage from an earlier sample to now.
func (m *CPUMeter) Since(start CPUSample) CPUUsage {
	end := m.Sample()
	wall := end.at.Sub(start.at).Seconds()
	if wall <= 0 {
		return CPUUsage{}
	}
	u := CPUUsage{
		Self:    (end.self - start.self).Seconds() / wall,
		PG:      (end.pg - start.pg).Seconds() / wall,
		PGKnown: m.postmaster > 0,
	}
	u.Other = max(0, (end.busy-start.busy).Seconds()/wall-u.Self-u.PG)
	u.IRQ = (end.irq - start.irq).Seconds() / wall
	return u
}

// postgresCPU is the CPU time of the postmaster, of its children that have
// exited (cutime/cstime) and of its live children.
func (m *CPUMeter) postgresCPU() time.Duration {
	var total time.Duration
	if f, ok := procStat(m.postmaster); ok {
		total += ticks(f, 11) + ticks(f, 12) + ticks(f, 13) + ticks(f, 14)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == m.postmaster {
			continue
		}
		f, ok := procStat(pid)
		if !ok || len(f) < 13 || f[1] != strconv.Itoa(m.postmaster) {
			continue
		}
		total += ticks(f, 11) + ticks(f, 12)
	}
	return total
}

// procStat returns the fields of /proc/PID/stat after the command name:
// f[0] is the state, f[1] the parent PID, f[11] utime, f[12] stime, f[13]
// cutime and f[14] cstime.
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) >= 15
}

func ticks(f []string, i int) time.Duration {
	if i >= len(f) {
		return 0
	}
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return time.Duration(n) * clockTick
}

// machineBusy is the non-idle CPU time of the whole machine since boot,
// and the part of it spent in interrupts.
func machineBusy() (busy, irq time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0
	}
	var nBusy, nIRQ int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		// user nice system idle iowait irq softirq steal [guest guest_nice]:
		// idle and iowait are not busy; guest time is already in user.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		nBusy += n
		if i == 5 || i == 6 {
			nIRQ += n
		}
	}
	return time.Duration(nBusy) * clockTick, time.Duration(nIRQ) * clockTick
}
