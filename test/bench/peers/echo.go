package main

import (
	"fmt"
	"net/http"

	"github.com/gorilla/websocket"
)

// echoServer is a plain Go echo WebSocket server, written as gorilla's own
// echo example is: the zero Upgrader (it reuses the HTTP server's buffers)
// and one goroutine per socket that writes back every message it reads.
// Any other request is a page load, which sets a session cookie as a site
// would; nginx's upstream hash reads it.
type echoServer struct{}

var echoUpgrader = websocket.Upgrader{}

func (echoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		ensureSession(w, r)
		fmt.Fprintln(w, "echo")
		return
	}
	ws, err := echoUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer ws.Close()
	ws.SetReadLimit(maxMessageBytes)
	for {
		kind, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if err := ws.WriteMessage(kind, msg); err != nil {
			return
		}
	}
}
