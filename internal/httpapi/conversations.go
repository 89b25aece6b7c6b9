package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Conversations is what /v1/conversations needs (package conversation's Store).
type Conversations interface {
	Create(ctx context.Context, req api.ConversationRequest) (*api.Conversation, error)
	Get(ctx context.Context, id string) (*api.Conversation, error)
	List(ctx context.Context, sessionID string) []api.Conversation
	Update(ctx context.Context, id string, req api.UpdateConversationRequest) (*api.Conversation, error)
	Delete(ctx context.Context, id string) error
	Send(ctx context.Context, id string, req api.MessageRequest, open func() func(event string, v any)) (*api.ConversationTurn, error)
	Decide(ctx context.Context, id string, req api.ApprovalRequest) error
	Stop(ctx context.Context, id string) error
}

var errNoConversations = fmt.Errorf("this server does not keep conversations: %w", errdefs.ErrUnavailable)

// conversations answers a /v1/conversations route with h, or unavailable when the server
// keeps none.
func (s *server) conversations(h func(c Conversations, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Conversations == nil {
			s.writeError(w, r, errNoConversations)
			return
		}
		h(s.opts.Conversations, w, r)
	}
}

func (s *server) createConversation(c Conversations, w http.ResponseWriter, r *http.Request) {
	var req api.ConversationRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	conv, err := c.Create(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, conv)
}

func (s *server) listConversations(c Conversations, w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.ConversationList{Conversations: c.List(r.Context(), r.URL.Query().Get("session_id"))})
}

func (s *server) getConversation(c Conversations, w http.ResponseWriter, r *http.Request) {
	conv, err := c.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, conv)
}

func (s *server) updateConversation(c Conversations, w http.ResponseWriter, r *http.Request) {
	var req api.UpdateConversationRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	conv, err := c.Update(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, conv)
}

func (s *server) deleteConversation(c Conversations, w http.ResponseWriter, r *http.Request) {
	if err := c.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sendMessage answers POST /v1/conversations/{id}/messages: the model's answer, as one
// ConversationTurn or, with Accept: text/event-stream, as "text", "call", "output" and
// "step" events and then the turn ("result") or an "error". A message refused (bad input,
// an answer already running, ...) is refused with its status before any stream starts.
func (s *server) sendMessage(c Conversations, w http.ResponseWriter, r *http.Request) {
	var req api.MessageRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	var ev *sseWriter
	var open func() func(string, any)
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		open = func() func(string, any) {
			ev = startSSE(w)
			return ev.send
		}
	}
	turn, err := c.Send(r.Context(), r.PathValue("id"), req, open)
	switch {
	case ev == nil && err != nil:
		s.writeError(w, r, err)
	case ev == nil:
		writeJSON(w, http.StatusOK, turn)
	case err != nil:
		ev.send("error", api.ErrorBody{Error: s.errorDetail(r, err)})
		ev.stop()
	default:
		ev.send("result", turn)
		ev.stop()
	}
}

func (s *server) decide(c Conversations, w http.ResponseWriter, r *http.Request) {
	var req api.ApprovalRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := c.Decide(r.Context(), r.PathValue("id"), req); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) stopConversation(c Conversations, w http.ResponseWriter, r *http.Request) {
	if err := c.Stop(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// providers answers GET /v1/providers: the model APIs this server can use.
func (s *server) providers(w http.ResponseWriter, r *http.Request) {
	list := []api.Provider{}
	if s.opts.Providers != nil {
		list = s.opts.Providers()
	}
	writeJSON(w, http.StatusOK, api.ProviderList{Providers: list})
}
