package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/keyring"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// operatorRoutes serves the operator's raft tools: removing a peer that is
// gone for good, and handing leadership to another server before
// maintenance. Both act on the leader; a follower forwards them.
func (a *Agent) operatorRoutes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	mux.HandleFunc("POST /v1/operator/raft/remove-peer", wrap(func(w http.ResponseWriter, r *http.Request) error {
		var req struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.ID == "" {
			return &api.Error{Status: http.StatusBadRequest, Message: `want {"id": "<raft id>"}`}
		}
		if _, leader := a.raft.Leader(); req.ID == leader {
			return &api.Error{Status: http.StatusConflict, Message: fmt.Sprintf("%s is the leader: transfer leadership first (stickyd operator raft transfer-leader)", req.ID)}
		}
		found := false
		if peers, err := a.raft.Peers(); err == nil {
			for _, p := range peers {
				found = found || p.ID == req.ID
			}
		}
		if !found {
			return &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no raft peer %q (stickyd operator raft list-peers lists them)", req.ID)}
		}
		status, err := a.memberHandler(r.Context(), api.MemberRequest{Op: "leave", Name: req.ID})
		if err != nil {
			return &api.Error{Status: status, Message: "removing the peer: " + err.Error()}
		}
		writeJSONOK(w, map[string]string{"removed": req.ID})
		return nil
	}))
	a.nomad.Routes(mux, wrap)
	// The maps as a raft snapshot, as this server holds them (Nomad's
	// operator snapshot save): a backup, and the size of the maps.
	mux.HandleFunc("GET /v1/operator/snapshot", wrap(func(w http.ResponseWriter, r *http.Request) error {
		meta, rc, err := a.raft.Snapshot()
		if err != nil {
			return &api.Error{Status: http.StatusServiceUnavailable, Message: err.Error()}
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(meta.Size, 10))
		w.Header().Set("X-Stickyd-Snapshot-Index", strconv.FormatUint(meta.Index, 10))
		w.Header().Set("X-Stickyd-Snapshot-Term", strconv.FormatUint(meta.Term, 10))
		_, _ = io.Copy(w, rc)
		return nil
	}))
	a.keyring.Routes(mux, wrap)
	mux.HandleFunc("POST /v1/operator/raft/transfer-leader", wrap(func(w http.ResponseWriter, r *http.Request) error {
		// An optional body names the voter to hand leadership to:
		// {"id": "stickyd-server-2"}; without one raft picks the most
		// up-to-date voter.
		var req struct {
			ID string `json:"id"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<12))
		if err != nil {
			return &api.Error{Status: http.StatusRequestEntityTooLarge, Message: "the request is too large"}
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &req); err != nil {
				return &api.Error{Status: http.StatusBadRequest, Message: `want {"id": "<a voter's id>"} or no body: ` + err.Error()}
			}
		}
		if !a.raft.IsLeader() {
			return a.forwardToLeader(w, r, body)
		}
		transfer := a.raft.Raft.LeadershipTransfer
		if req.ID != "" {
			peers, err := a.raft.Peers()
			if err != nil {
				return &api.Error{Status: http.StatusServiceUnavailable, Message: "reading the raft configuration: " + err.Error()}
			}
			var to *raftnode.Peer
			for i := range peers {
				if peers[i].ID == req.ID {
					to = &peers[i]
				}
			}
			switch {
			case to == nil:
				return &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no raft peer %q", req.ID)}
			case !to.Voter:
				return &api.Error{Status: http.StatusConflict, Message: fmt.Sprintf("%s is not a voter: only a voter can lead", req.ID)}
			case req.ID == a.cfg.Name:
				_, leader := a.raft.Leader()
				writeJSONOK(w, map[string]string{"from": a.cfg.Name, "leader": leader})
				return nil
			}
			transfer = func() raft.Future {
				return a.raft.Raft.LeadershipTransferToServer(raft.ServerID(to.ID), raft.ServerAddress(to.Address))
			}
		}
		if err := transfer().Error(); err != nil {
			if errors.Is(err, raft.ErrNotLeader) {
				return &api.Error{Status: http.StatusServiceUnavailable, Message: "leadership moved meanwhile; retry"}
			}
			return &api.Error{Status: http.StatusConflict, Message: "transferring leadership: " + err.Error()}
		}
		_, leader := a.raft.Leader()
		writeJSONOK(w, map[string]string{"from": a.cfg.Name, "leader": leader})
		return nil
	}))
}

// Keyring and KeyringKey are GET /v1/operator/keyring's answer, owned by
// internal/keyring; the names stay for the API client's drift test.
type (
	Keyring    = keyring.Ring
	KeyringKey = keyring.Key
)

// forwardToLeader passes an operator call a follower got to the leader,
// with body, and answers with the leader's answer.
func (a *Agent) forwardToLeader(w http.ResponseWriter, r *http.Request, body []byte) error {
	admin := a.leaderAdmin(r.Context())
	if admin == "" {
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "no leader known yet; retry"}
	}
	b, err := a.fetch(r.Context(), r.Method, admin, r.URL.Path, body)
	if err != nil {
		var re *remoteErr
		if errors.As(err, &re) {
			return &api.Error{Status: re.status, Message: re.Error()}
		}
		return &api.Error{Status: http.StatusBadGateway, Message: "asking the leader: " + err.Error()}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	return nil
}

func writeJSONOK(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
