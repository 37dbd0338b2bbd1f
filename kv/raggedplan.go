package kv

import (
	"fmt"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/engine"
)

// What a ragged step launches, said before it runs.

// RaggedPlan is what a ragged step of given counts launches: the prefill
// call of its chunks (nil without one) and the decode call of its single
// tokens (nil without one).
type RaggedPlan struct {
	// Chunk plans ChunkSequences items of ChunkRows query rows each:
	// every sequence bringing more than one token, its tokens the last
	// rows of its item.
	Chunk                     *vkattn.Plan
	ChunkSequences, ChunkRows int
	// Decode plans one query row for each of the cache's sequences, of
	// which DecodeSequences bring one token (the others' rows are padding).
	Decode          *vkattn.Plan
	DecodeSequences int
}

// String says what the step runs, a line per call.
func (p RaggedPlan) String() string {
	s := ""
	if p.Chunk != nil {
		s += fmt.Sprintf("prefill part: %d sequence(s) of more than one token, %d rows each: %s\n", p.ChunkSequences, p.ChunkRows, p.Chunk)
	}
	if p.Decode != nil {
		s += fmt.Sprintf("decode part: %d sequence(s) of one token: %s\n", p.DecodeSequences, p.Decode)
	}
	if s == "" {
		s = "no tokens: nothing runs\n"
	}
	return s
}

// Plan is the plan of a step of counts as Run would launch it now, with
// the sequences' current lengths (preparing its calls if need be).
func (s *RaggedStep) Plan(counts []int) (RaggedPlan, error) {
	if err := s.lock(); err != nil {
		return RaggedPlan{}, err
	}
	defer s.mu.Unlock()
	sh, err := s.shape(counts)
	if err != nil {
		return RaggedPlan{}, err
	}
	if sh.total == 0 {
		return RaggedPlan{}, nil
	}
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return RaggedPlan{}, err
	}
	rows, calls, err := s.calls(sh)
	if err != nil {
		return RaggedPlan{}, err
	}
	p := RaggedPlan{ChunkSequences: len(sh.chunks), ChunkRows: rows, DecodeSequences: len(sh.decode)}
	planOf := func(call *engine.Call) *vkattn.Plan {
		plan := call.Output().Plan.Plan
		return &plan
	}
	if len(sh.chunks) > 0 { // the prefill call first, the decode call last
		p.Chunk = planOf(calls[0])
	}
	if len(sh.decode) > 0 {
		p.Decode = planOf(calls[len(calls)-1])
	}
	return p, nil
}
