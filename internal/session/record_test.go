package session

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
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
	load := func() record { t.Helper(); return onlyRecord(t, m) }
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

// A turn shorter than busySave writes no record, before or after, while the last write is
// younger than saveEvery; a longer one writes busy once it has run busySave, and not busy
// when it ends; activity past saveEvery is written.
func TestTurnsWriteTheirRecord(t *testing.T) {
	m := &Manager{records: records{dir: t.TempDir()}, log: testLog, adm: newAdmission(caps{}, nil)}
	s := &Session{id: "abc123", box: &box{id: "abc123"}, turn: newTurn()}
	m.save(s)
	load := func() record { t.Helper(); return onlyRecord(t, m) }
	turn := func(count int) {
		t.Helper()
		_, _, release, err := m.admitIn(context.Background(), s, kindExecute)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.execCount = count
		s.mu.Unlock()
		release()
	}
	// Waits for the background writers, as Shutdown does, without closing admission.
	settle := func() {
		t.Helper()
		testbin.WaitFor(t, 10*time.Second, "the record's writers", func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.saving {
				return io.ErrNoProgress
			}
			return nil
		})
	}

	defer func(d time.Duration) { busySave = d }(busySave)
	busySave = time.Hour // no turn here is long, however slow the machine
	for i := 1; i <= 20; i++ {
		turn(i)
	}
	settle()
	if r := load(); r.ExecutionCount != 0 || r.Busy {
		t.Errorf("short turns within saveEvery wrote the record: count %d, busy %v", r.ExecutionCount, r.Busy)
	}

	busySave = 50 * time.Millisecond
	_, _, release, err := m.admitIn(context.Background(), s, kindExecute)
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 10*time.Second, "a long turn's record to say busy", func() error {
		if r := load(); !r.Busy || r.ExecutionCount != 20 {
			return fmt.Errorf("busy %v, count %d", r.Busy, r.ExecutionCount)
		}
		return nil
	})
	s.mu.Lock()
	s.execCount = 21
	s.mu.Unlock()
	release()
	settle()
	if r := load(); r.Busy || r.ExecutionCount != 21 {
		t.Errorf("after a long turn: busy %v, count %d; want false, 21", r.Busy, r.ExecutionCount)
	}

	// A long turn, then at once a short one, while the long one's busy may still be being
	// written: whichever order the writer and the turns take, the record ends not busy.
	for range 20 {
		_, _, release, err := m.admitIn(context.Background(), s, kindExecute)
		if err != nil {
			t.Fatal(err)
		}
		testbin.WaitFor(t, 10*time.Second, "a long turn's record to say busy", func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.savedBusy {
				return io.ErrNoProgress
			}
			return nil
		})
		release()
		turn(21)
		settle()
		if r := load(); r.Busy {
			t.Fatal("the record says busy after the turns ended")
		}
	}

	// A notice the turn set is written at its end.
	busySave = time.Hour
	_, _, release, err = m.admitIn(context.Background(), s, kindExecute)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.notice = "[cellbox: tools dropped]\n"
	s.mu.Unlock()
	release()
	settle()
	if r := load(); r.Notice == "" {
		t.Error("a notice set in a short turn was not written")
	}

	s.mu.Lock()
	s.saved = time.Now().Add(-saveEvery - time.Second) // as if the last write were that old
	s.mu.Unlock()
	turn(22)
	settle()
	if r := load(); r.ExecutionCount != 22 {
		t.Errorf("activity past saveEvery was not written: count %d", r.ExecutionCount)
	}
}

// onlyRecord is the one record m's folder holds.
func onlyRecord(t *testing.T, m *Manager) record {
	t.Helper()
	recs, bad, err := m.records.load()
	if err != nil || len(bad) > 0 || len(recs) != 1 {
		t.Fatalf("records: %+v, bad %v, err %v", recs, bad, err)
	}
	return recs[0]
}
