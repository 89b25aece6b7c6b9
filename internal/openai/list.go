package openai

import (
	"net/http"
	"slices"
	"strconv"
)

// page is OpenAI's list shape, for its cursor pagination: the SDK asks for the next page
// with after=<last_id> while has_more.
type page[T any] struct {
	Object  string  `json:"object"` // "list"
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// listing is what the query of a list asks for: limit, order, after.
type listing struct {
	limit int
	desc  bool
	after string
}

// parseListing reads limit (1 to max, def when absent), order (asc | desc, desc when
// absent, as OpenAI's) and after.
func parseListing(r *http.Request, def, max int) (listing, error) {
	q := r.URL.Query()
	l := listing{limit: def, desc: true, after: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			return l, invalid("limit", "limit must be a number from 1 to %d", max)
		}
		l.limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		l.desc = false
	default:
		return l, invalid("order", "order must be asc or desc")
	}
	return l, nil
}

// item is what a list is ordered by: creation (unix seconds), then id.
type item interface {
	key() (created int64, id string)
}

// cut sorts all in l's order and returns the page after l.after. An after that names no
// item is refused: it was deleted since the page before, or never was.
func cut[T item](l listing, all []T) (page[T], error) {
	slices.SortFunc(all, func(a, b T) int {
		ca, ia := a.key()
		cb, ib := b.key()
		c := 0
		switch {
		case ca < cb:
			c = -1
		case ca > cb:
			c = 1
		case ia < ib:
			c = -1
		case ia > ib:
			c = 1
		}
		if l.desc {
			c = -c
		}
		return c
	})
	start := 0
	if l.after != "" {
		i := slices.IndexFunc(all, func(x T) bool { _, id := x.key(); return id == l.after })
		if i < 0 {
			return page[T]{}, invalid("after", "after %q names nothing in this list (deleted since the page before?): start again without after", trunc(l.after))
		}
		start = i + 1
	}
	data := all[start:]
	p := page[T]{Object: "list", Data: data}
	if len(data) > l.limit {
		p.Data, p.HasMore = data[:l.limit], true
	}
	if p.Data == nil {
		p.Data = []T{}
	}
	if n := len(p.Data); n > 0 {
		_, first := p.Data[0].key()
		_, last := p.Data[n-1].key()
		p.FirstID, p.LastID = &first, &last
	}
	return p, nil
}

// trunc shortens what a client sent for an error message.
func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
