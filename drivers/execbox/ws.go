package execbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// politeCloseWait bounds the WebSocket close handshake after done: a
// runner that does not answer it is cut off.
const politeCloseWait = 100 * time.Millisecond

// wsTransport is a WebSocket session: one JSON text frame per message.
type wsTransport struct {
	conn *websocket.Conn
	// ctx bounds every read and write; it ends with the session.
	ctx    context.Context
	cancel context.CancelFunc
	max    int

	mu  sync.Mutex
	raw []net.Conn // the network connections under conn, for a forced close
}

// dialWS opens a WebSocket session with the runner at url.
func dialWS(ctx context.Context, url string, maxMessage int) (*wsTransport, error) {
	t := &wsTransport{max: maxMessage}
	dialer := &net.Dialer{}
	client := &http.Client{
		Transport: &http.Transport{
			// Keep hold of the connection: the library's own close waits
			// up to ten seconds for a peer that does not take part in
			// the close handshake, and a runner that ignores cancel is
			// exactly such a peer.
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err == nil {
					t.mu.Lock()
					t.raw = append(t.raw, c)
					t.mu.Unlock()
				}
				return c, err
			},
			DisableKeepAlives: true,
		},
		// A runner endpoint that redirects is misconfigured.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.closeRaw()
		if resp != nil {
			return nil, fmt.Errorf("%w (HTTP %d): %w", errHandshake, resp.StatusCode, err)
		}
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			// Its text quotes the URL, query included, which may hold a
			// token; the driver's message names the runner without it.
			return nil, fmt.Errorf("websocket dial: %w", uerr.Err)
		}
		return nil, err
	}
	conn.SetReadLimit(int64(maxMessage))
	t.conn = conn
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

func (t *wsTransport) send(msg []byte) error {
	return t.conn.Write(t.ctx, websocket.MessageText, msg)
}

func (t *wsTransport) recv() ([]byte, error) {
	// Binary frames are accepted too: the message is the same JSON.
	_, b, err := t.conn.Read(t.ctx)
	if errors.Is(err, websocket.ErrMessageTooBig) {
		return nil, fmt.Errorf("%w of %d bytes", errMessageTooLarge, t.max)
	}
	return b, err
}

func (t *wsTransport) close(force bool) error {
	defer t.cancel()
	if force {
		t.closeRaw()
		t.conn.CloseNow()
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.conn.Close(websocket.StatusNormalClosure, "")
	}()
	timer := time.NewTimer(politeCloseWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.closeRaw()
		<-done
	}
	return nil
}

// closeRaw closes the network connections under the WebSocket, which
// makes every pending and future read and write fail at once.
func (t *wsTransport) closeRaw() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.raw {
		c.Close()
	}
}
