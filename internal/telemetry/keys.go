package telemetry

// Log attribute keys, the one list of them. The first group are the
// reference's per-request field names (drop-in contract); the second group
// are the other keys of the canonical "proxy decision" line, whose real
// output internal/proxy/testdata/decision.golden holds; the last group are
// lifecycle and connection fields.
const (
	KeyRequestID       = "request_id"
	KeyHost            = "host"
	KeyMethod          = "method"
	KeyPath            = "path"
	KeyDecision        = "decision"
	KeyHeaderRewritten = "header_rewritten" // a rewritten header's configured name, never its value
	KeySecretRef       = "secret_ref"       // a secret's key name, never its value
	KeyUpstreamStatus  = "upstream_status"
	KeyError           = "error"

	KeyListener     = "listener" // "http", "https" or "connect"
	KeyPort         = "port"
	KeyRule         = "rule"
	KeyReason       = "reason"
	KeyStatus       = "status"
	KeyDurationMS   = "duration_ms"
	KeyBytesIn      = "bytes_in"
	KeyBytesOut     = "bytes_out"
	KeyUpstreamAddr = "upstream_addr" // IP:port actually dialled
	KeyUpgrade      = "upgrade"       // the Upgrade token of a refused upgrade request
	// KeyQueryRewritten lists the query parameters a rule's
	// query_rewrites set: configured names, never values.
	KeyQueryRewritten = "query_rewritten"
	// KeyTruncated is true when a free-form field of the line (path, host
	// as given, error) was cut to its bound; absent otherwise.
	KeyTruncated = "truncated"
	// KeyRepeated is, on a summary line, how many identical denials on
	// the same connection were counted but not logged one by one.
	KeyRepeated = "repeated"

	KeyPeer       = "peer"        // client address; only on connection errors and limit drops
	KeyAddr       = "addr"        // a listener's address
	KeyConfigPath = "config_path" // the config file being loaded
	KeyFile       = "file"        // another file BotBox writes (the probe key)
	KeyDir        = "dir"         // a directory BotBox reads or writes (placeholders.dir)
)

// KeyWhere is, on a "secret reflected in response" line, where the
// masked occurrence was: a header name, "header name" (the name itself
// held it), "status", "trailer:<name>", "body" or "websocket".
const KeyWhere = "where"

// KeyRoute is the decision line's index, in its rule's routes, of the
// route that decided; absent when no route did.
const KeyRoute = "route"

// Keys of the listener and server lines (connection drops, sampled
// rejections, accept retries).
const (
	KeyCount    = "count"     // events one sampled line stands for
	KeyRetryIn  = "retry_in"  // back-off before the next Accept
	KeyLimit    = "limit"     // the budget that was exhausted
	KeyInFlight = "in_flight" // connections open when the drain starts
	KeyField    = "field"     // a config key a start-up warning is about
)

// Keys of the configuration reload lines.
const (
	KeyTrigger    = "trigger"    // what started a reload: sighup, event, resync
	KeyGeneration = "generation" // the policy generation in force after a reload
	KeyKeys       = "keys"       // config keys that changed but need a restart
)

// Keys of the tripwire line (the decision line of a request that carried a
// placeholder towards a host that may not receive its secret).
const (
	KeyEvent    = "event"    // EventSecretTripwire
	KeyFoundIn  = "found_in" // FoundInHost, FoundInURL, FoundInHeader or FoundInBody
	KeyEncoding = "encoding" // the placeholder's spelling: literal, percent_encoded, json_escaped, base64
	// KeyPlaceholders is, on the start-up line of placeholders.dir, how
	// many placeholders were written.
	KeyPlaceholders = "placeholders"
)

// KeyCredential is the name of the rule's credential (config
// credentials.<name>) on a decision line, and of the credential on its
// refresh lines; never a key or a token.
const KeyCredential = "credential"

// Keys of `botbox webhook`'s admission review line.
const (
	KeyEndpoint  = "endpoint"  // mutate or validate
	KeyUID       = "uid"       // the AdmissionReview request's uid
	KeyNamespace = "namespace" // the Pod's namespace
	KeyName      = "name"      // the Pod's name (empty for generateName on CREATE)
	KeyOperation = "operation" // CREATE, UPDATE, ...
	KeyResult    = "result"    // allowed, patched, denied, invalid
)

// KeyEngine is the decision line's HTTP server engine: EngineBotBox for
// a request served by BotBox's own HTTP/1.1 engine (package engine),
// EngineNetHTTP for one served by net/http (HTTP/2, CONNECT and its
// tunnels, upgrades, and every connection the engine handed over).
const KeyEngine = "engine"

// The values of KeyEngine.
const (
	EngineBotBox  = "botbox"
	EngineNetHTTP = "net/http"
)
