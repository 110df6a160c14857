package client

import (
	"github.com/slipstream-io/slipstream/internal/loader"
)

// Router routes the load generator's requests to the owners of their
// objects: Route returns a base URL whose host is the owner's first public
// address, and the client's HTTPClient (which the loader must use, through
// loader.Config.HTTPClient) spreads the request over all of the owner's
// addresses.
type Router struct{ c *Client }

var _ loader.Router = (*Router)(nil)

// Router returns a loader.Router over this client.
func (c *Client) Router() *Router { return &Router{c: c} }

// Route implements loader.Router: the owner of bucket/key, or any node
// that is up for a bucket-level request (key empty).
func (r *Router) Route(bucket, key string) (string, error) {
	if r.c.closed.Load() {
		return "", ErrClosed
	}
	hp, _, err := r.c.hostFor(bucket, key)
	if err != nil {
		return "", err
	}
	return r.c.scheme + "://" + hp, nil
}

// Name implements loader.Router.
func (*Router) Name() string { return "owner" }

// LoaderConfig sets cfg's Router and HTTPClient so that a loader run goes
// straight to the owners over every address; it returns cfg.
func (c *Client) LoaderConfig(cfg loader.Config) loader.Config {
	cfg.Router = c.Router()
	cfg.HTTPClient = c.HTTPClient()
	return cfg
}
