package session

import (
	"context"
	"testing"
)

// Activity is written in the background, one writer per session: the record ends as the
// session is after its last change, however many changes came while a write was going
// on; once the manager is closed, the caller writes itself.
func TestSaveSoonWritesTheLastState(t *testing.T) {
	m := &Manager{records: records{dir: t.TempDir()}, log: testLog, adm: newAdmission(caps{}, nil)}
	s := &Session{id: "abc123", box: &box{id: "abc123"}}
	for i := 1; i <= 200; i++ {
		s.mu.Lock()
		s.execCount, s.busy = i, i%2 == 1
		s.mu.Unlock()
		m.saveSoon(s)
	}
	m.adm.close() // as Shutdown does: then it waits for the writers
	m.adm.wait(context.Background())
	load := func() record {
		t.Helper()
		recs, bad, err := m.records.load()
		if err != nil || len(bad) > 0 || len(recs) != 1 {
			t.Fatalf("records: %+v, bad %v, err %v", recs, bad, err)
		}
		return recs[0]
	}
	if r := load(); r.ExecutionCount != 200 || r.Busy {
		t.Errorf("after 200 changes the record has execution count %d, busy %v; want 200, false", r.ExecutionCount, r.Busy)
	}

	s.mu.Lock()
	s.execCount = 201
	s.mu.Unlock()
	m.saveSoon(s)
	if r := load(); r.ExecutionCount != 201 {
		t.Errorf("a save after the manager closed was not written at once: execution count %d", r.ExecutionCount)
	}

	// An ended session's record stays removed.
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := m.records.remove(s.id); err != nil {
		t.Fatal(err)
	}
	m.saveSoon(s)
	if recs, _, _ := m.records.load(); len(recs) != 0 {
		t.Errorf("a save of an ended session wrote its record again: %+v", recs)
	}
}
