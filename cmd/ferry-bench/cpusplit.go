package main

import (
	"bytes"
	"runtime/pprof"

	"github.com/google/pprof/profile"
)

// clientShare profiles the bench process over one window to split its CPU
// between Ferry's server and the load generator, whose goroutines carry the
// pprof label role=client. Everything unlabelled (handlers, the engine, pgx,
// the garbage collector's background work) counts as the server's: it is
// what Ferry would cost in a process of its own, give or take the share of
// garbage the load generator makes.
type clientShare struct {
	buf bytes.Buffer
	on  bool
}

// startClientShare starts the window's profile. Only one CPU profile runs
// at a time in a process: under -cpuprofile, or while another window
// profiles, it does nothing and the split stays unknown.
func startClientShare() *clientShare {
	s := &clientShare{}
	s.on = pprof.StartCPUProfile(&s.buf) == nil
	return s
}

// stop ends the profile and returns the fraction of the sampled CPU time
// spent by load-generator goroutines; ok is false when nothing was sampled.
func (s *clientShare) stop() (frac float64, ok bool) {
	if !s.on {
		return 0, false
	}
	pprof.StopCPUProfile()
	p, err := profile.Parse(&s.buf)
	if err != nil {
		return 0, false
	}
	return clientFraction(p)
}

// clientFraction is the share of a CPU profile's time whose samples carry
// role=client.
func clientFraction(p *profile.Profile) (float64, bool) {
	col := len(p.SampleType) - 1 // "cpu" nanoseconds is the last value
	if col < 0 {
		return 0, false
	}
	var total, client int64
	for _, s := range p.Sample {
		v := s.Value[col]
		total += v
		if roles := s.Label["role"]; len(roles) > 0 && roles[0] == "client" {
			client += v
		}
	}
	if total == 0 {
		return 0, false
	}
	return float64(client) / float64(total), true
}
