# The cache edge in front of LiveFuse's results origin (GET /results/<key> on `livefuse serve`).
# Result keys are immutable and unguessable, so a result is cached by its path alone and kept until it is
# purged or evicted; the origin's Cache-Control decides: `public, max-age=31536000, immutable` is cached,
# `private, no-store` (serve --results-private) never is. Varnish answers If-None-Match (304) and Range
# (206) from the cached object. Deleting a result on the server sends PURGE <path> from an address in
# `purgers`; BAN with an `X-Ban-Prefix: /results/jobs/<id>/` header drops every object under a prefix.
# Everything but /results/ passes through uncached (the API, the page, health).
#
# The backend and the purgers list live in backend.vcl beside this file (the Helm chart renders it from
# its values; tests/deploy/test_varnish_edge.py writes one for its loopback origin).

vcl 4.1;


include "backend.vcl";

sub vcl_recv {
    if (req.method == "PURGE") {
        if (!client.ip ~ purgers) {
            return (synth(403, "purge not allowed from this address"));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (!client.ip ~ purgers) {
            return (synth(403, "ban not allowed from this address"));
        }
        if (req.http.X-Ban-Prefix !~ "^/results/[A-Za-z0-9/_-]+$") {
            return (synth(400, "BAN needs an X-Ban-Prefix header: a path under /results/ (letters, digits, / _ -)"));
        }
        ban("obj.http.X-Url-Path ~ ^" + req.http.X-Ban-Prefix);
        return (synth(200, "banned"));
    }
    if (req.url !~ "^/results/") {
        return (pass);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # a result is the same object whoever asks: credentials and cookies never reach the cache key
    unset req.http.Authorization;
    unset req.http.Cookie;
    set req.url = regsub(req.url, "\?.*$", "");
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);   # the path alone (not the Host): a purge from inside the cluster hits what users fetched
    return (lookup);
}

sub vcl_backend_response {
    set beresp.http.X-Url-Path = bereq.url;   # for BAN by prefix (the ban lurker reads the object, not the request)
    if (beresp.status != 200 && beresp.status != 206) {
        set beresp.uncacheable = true;        # a 404 now may be a result that lands later
        set beresp.ttl = 0s;
        return (deliver);
    }
    if (beresp.http.Cache-Control ~ "(?i)(private|no-store|no-cache)") {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
        return (deliver);
    }
    return (deliver);
}

sub vcl_deliver {
    unset resp.http.X-Url-Path;
    if (obj.uncacheable) {
        set resp.http.X-Cache = "PASS";
    } elsif (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
