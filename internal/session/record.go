package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/statefile"
)

// record is what survives of a session when the server process ends: enough to attach to
// its sandbox again, or to start a new one on the same workspace. One JSON file per
// session in the records folder, readable by root only (env may hold secrets).
type record struct {
	ID             string            `json:"id"`
	Tenant         string            `json:"tenant"`
	Language       string            `json:"language"`
	IdleTimeoutS   float64           `json:"idle_timeout_s"`
	CreatedAt      time.Time         `json:"created_at"`
	LastActiveAt   time.Time         `json:"last_active_at"`
	ExecutionCount int               `json:"execution_count"`
	Limits         api.Limits        `json:"limits"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Artifacts      []string          `json:"artifacts,omitempty"` // Session.keep
	// Image is what the session's sandbox runs on; "" (and records from before images):
	// the backend's own root.
	Image string `json:"image,omitempty"`
	// ExpiresAt is the session's deadline (see lifetime.go); nil: none.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Busy: a run held the session when this was written. A server that died meanwhile
	// ended that run; the session counts as active until then.
	Busy bool `json:"busy,omitempty"`
	// Notice is what the session's next execution is told (see Session.notice).
	Notice string `json:"notice,omitempty"`
	// Network is the egress policy as asked for, secret values included; nil: the default.
	Network *api.Network `json:"network,omitempty"`
	// CA is the session's certificate authority with its key (PEM); "": none.
	CA string `json:"ca,omitempty"`
	// Tools are the kernel's tools as last reported, each marked when it is the session's
	// saved copy; checked again when read.
	Tools []toolRecord `json:"tools,omitempty"`
	// IdleAction is what the idle timeout does (api.IdleActionEnd or Pause); "" (records
	// from before pauses): end.
	IdleAction string `json:"idle_action,omitempty"`
	// Checkpointable: its sandbox was made so that it can be checkpointed (boxSpec).
	Checkpointable bool `json:"checkpointable,omitempty"`
	// PausedAt: the session is paused, its checkpoint in <state>/checkpoints/<id>, taking
	// CheckpointBytes; nil: it has a sandbox.
	PausedAt        *time.Time `json:"paused_at,omitempty"`
	CheckpointBytes int64      `json:"checkpoint_bytes,omitempty"`
	// Moves is how many times the session moved between cluster nodes (move.go).
	Moves int `json:"moves,omitempty"`
}

// saveEvery throttles the records written for activity alone (cells, commands, file
// calls): after a crash, the next server may see a session as idle this much longer than
// it was, and its execution count as of up to this long ago (a clean exit writes every
// record first). Writing each cell's activity cost a write and an fsync, twice a cell:
// ~0.5 ms of the server's CPU and more of the disk's, on the two cores the cell runs on
// too (docs/ARCHITECTURE.md, "Session records").
const saveEvery = 10 * time.Second

// busySave is how long a cell, command or restart runs before its session's record says
// busy: a session busy when its server died counts as active until the next server starts
// (restore), so that a long cell does not make it look idle; a crash within a shorter run
// leaves the record as it was before the run. A variable for tests.
var busySave = time.Second

// activityStale reports whether the record's activity is more than saveEvery behind the
// session's. s.mu is held.
func (s *Session) activityStale() bool { return s.lastActive.Sub(s.saved) > saveEvery }

// mustSave reports whether the end of a run must write the record at once, activity aside:
// the record says busy, or the run changed the notice or reset the execution count (a
// restart). s.mu is held.
func (s *Session) mustSave() bool {
	return s.savedBusy || s.notice != s.savedNotice || s.execCount < s.savedCount
}

// records is the folder of session records; a zero dir keeps none.
type records struct{ dir string }

func (r records) path(id string) string { return filepath.Join(r.dir, id+".json") }

// save writes rec whole (a new file renamed over the old).
func (r records) save(rec record) error {
	if r.dir == "" {
		return nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := statefile.Write(r.path(rec.ID), data, 0o600); err != nil {
		return fmt.Errorf("save session %s: %w", rec.ID, err)
	}
	return nil
}

func (r records) remove(id string) error {
	if r.dir == "" {
		return nil
	}
	if err := os.Remove(r.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the record of session %s: %w", id, err)
	}
	return nil
}

// load reads every record. A record that does not decode is removed and reported in bad,
// as are leftovers of an interrupted save; files that are not records are left alone.
func (r records) load() (recs []record, bad []error, err error) {
	if r.dir == "" {
		return nil, nil, nil
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("session records: %w", err)
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("session records: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(r.dir, name)
		id, ok := strings.CutSuffix(name, ".json")
		switch {
		case strings.HasPrefix(name, ".tmp-") && e.Type().IsRegular():
			os.Remove(p)
			continue
		case !ok || !e.Type().IsRegular():
			bad = append(bad, fmt.Errorf("%s is not a session record; left alone", name))
			continue
		}
		var rec record
		data, rerr := os.ReadFile(p)
		if rerr == nil && json.Unmarshal(data, &rec) == nil && rec.ID == id && validID(id) {
			recs = append(recs, rec)
			continue
		}
		bad = append(bad, fmt.Errorf("%s is not a valid session record; removed it", name))
		os.Remove(p)
	}
	return recs, bad, nil
}

// validID: what newID makes (hex); a record's id names files and sandboxes.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// recordLocked returns the session's record as it stands; s.mu is held.
func (s *Session) recordLocked() record {
	var expires *time.Time
	if !s.expires.IsZero() {
		t := s.expires
		expires = &t
	}
	var pausedAt *time.Time
	if !s.pausedAt.IsZero() {
		t := s.pausedAt
		pausedAt = &t
	}
	return record{
		PausedAt:        pausedAt,
		CheckpointBytes: s.checkpointBytes,
		Moves:           s.moves,
		IdleAction:      s.idleAction,
		Checkpointable:  s.box.checkpointable,
		ID:              s.id,
		Tenant:          s.tenant,
		Language:        s.language,
		IdleTimeoutS:    s.idle.Seconds(),
		CreatedAt:       s.created,
		LastActiveAt:    s.lastActive,
		ExecutionCount:  s.execCount,
		Limits:          s.box.limits,
		Env:             s.box.env,
		Image:           s.box.image,
		Metadata:        s.metadata,
		Artifacts:       s.keep,
		ExpiresAt:       expires,
		Busy:            s.busy,
		Notice:          s.notice,
		Network:         s.network,
		CA:              s.caPEM(),
		Tools:           toolRecords(s.tools),
	}
}

// spec is what the session's sandbox was started with.
func (r record) spec() boxSpec {
	return boxSpec{image: r.Image, limits: r.Limits, env: r.Env, checkpointable: r.Checkpointable}
}

// saveSoon writes the session's record in the background, for activity (busy, last
// active, the execution count): a cell's answer does not wait for the disk (a write and
// an fsync, ~0.6 ms each here). One writer per session at a time, which writes until no
// change is left unwritten; each write is of the record as it is then.
func (m *Manager) saveSoon(s *Session) {
	s.mu.Lock()
	s.dirty = true
	if s.saving || s.closed {
		s.mu.Unlock()
		return
	}
	s.saving = true
	s.mu.Unlock()
	write := func() {
		for {
			s.mu.Lock()
			if !s.dirty {
				s.saving = false
				s.mu.Unlock()
				return
			}
			s.dirty = false
			s.mu.Unlock()
			m.save(s)
		}
	}
	// Shutdown waits for the writers; once it waits for nothing more, the caller writes.
	done, ok := m.adm.track()
	if !ok {
		write()
		return
	}
	go func() {
		defer done()
		write()
	}()
}

// save writes the session's record; saves of one session happen one at a time, in order.
func (m *Manager) save(s *Session) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	rec := s.recordLocked()
	s.saved = time.Now()
	s.savedBusy, s.savedNotice, s.savedCount = rec.Busy, rec.Notice, rec.ExecutionCount
	s.mu.Unlock()
	if err := m.records.save(rec); err != nil {
		m.log.Warn("save session record; the session may not survive a restart", "session_id", s.id, "err", err)
	}
}

// caPEM is the session's authority for its record; s.mu is held.
func (s *Session) caPEM() string {
	if s.ca == nil {
		return ""
	}
	pem, err := s.ca.Marshal()
	if err != nil {
		return ""
	}
	return pem
}
