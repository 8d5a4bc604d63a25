import java.io.IOException;
import java.io.Reader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * An APNs provider written with nothing but the JDK: java.net.http.HttpClient speaking
 * HTTP/2, and a provider token signed with java.security.Signature "SHA256withECDSA".
 *
 * "SHA256withECDSA" produces DER-encoded ECDSA signatures; this class sends them as they come,
 * the way a JDK user who has not read the JOSE spec would (JOSE wants the raw r||s form, which
 * the JDK gives as "SHA256withECDSAinP1363Format"). APNs accepts both.
 *
 * It talks to Apple's host names: api.sandbox.push.apple.com on 443 and api.push.apple.com on
 * the alternative port 2197. Trust comes from the JVM's trust store, e.g.
 * -Djavax.net.ssl.trustStore=truststore.p12 -Djavax.net.ssl.trustStorePassword=changeit.
 *
 * Usage: java ApnsProvider JOB.properties   (the job is written by Tests/compat/run.py)
 * Prints one JSON line per push: what HttpClient reported.
 */
public final class ApnsProvider {
    static final String SANDBOX = "https://api.sandbox.push.apple.com";
    static final String PRODUCTION = "https://api.push.apple.com:2197";

    /** What came back for one push. */
    record Result(int status, String apnsId, String reason, Long timestamp, String error) {}

    private final HttpClient client;
    private final String teamId;
    private final String keyId;
    private final String topic;
    private final PrivateKey signingKey;
    private final Duration timeout;
    private String providerToken;
    private long providerTokenIssuedAt;

    ApnsProvider(String teamId, String keyId, Path p8, String topic, Duration timeout)
            throws IOException, GeneralSecurityException {
        this.teamId = teamId;
        this.keyId = keyId;
        this.topic = topic;
        this.timeout = timeout;
        this.signingKey = readP8(p8);
        this.client = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_2)
                .connectTimeout(Duration.ofSeconds(10))
                .build();
    }

    /** An AuthKey_XXXX.p8 file is a PEM "PRIVATE KEY": PKCS#8, base64 between the armour lines. */
    static PrivateKey readP8(Path p8) throws IOException, GeneralSecurityException {
        String base64 = Files.readString(p8)
                .replace("-----BEGIN PRIVATE KEY-----", "")
                .replace("-----END PRIVATE KEY-----", "")
                .replaceAll("\\s", "");
        byte[] der = Base64.getDecoder().decode(base64);
        return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(der));
    }

    /** The provider token, re-signed when it is older than 20 minutes (Apple allows up to 60). */
    synchronized String providerToken() throws GeneralSecurityException {
        long now = System.currentTimeMillis() / 1000;
        if (providerToken == null || now - providerTokenIssuedAt > 20 * 60) {
            Base64.Encoder base64url = Base64.getUrlEncoder().withoutPadding();
            String header = base64url.encodeToString(
                    ("{\"alg\":\"ES256\",\"kid\":\"" + keyId + "\"}").getBytes(StandardCharsets.UTF_8));
            String claims = base64url.encodeToString(
                    ("{\"iss\":\"" + teamId + "\",\"iat\":" + now + "}").getBytes(StandardCharsets.UTF_8));
            Signature ecdsa = Signature.getInstance("SHA256withECDSA");
            ecdsa.initSign(signingKey);
            ecdsa.update((header + "." + claims).getBytes(StandardCharsets.US_ASCII));
            byte[] derSignature = ecdsa.sign();
            providerToken = header + "." + claims + "." + base64url.encodeToString(derSignature);
            providerTokenIssuedAt = now;
        }
        return providerToken;
    }

    /** POST /3/device/TOKEN; completes with the answer (never exceptionally). */
    CompletableFuture<Result> send(String server, String deviceToken, String pushType, int priority,
                                   String payload) {
        HttpRequest request;
        try {
            request = HttpRequest.newBuilder(URI.create(server + "/3/device/" + deviceToken))
                    .timeout(timeout)
                    .header("authorization", "bearer " + providerToken())
                    .header("apns-topic", topic)
                    .header("apns-push-type", pushType)
                    .header("apns-priority", Integer.toString(priority))
                    .POST(HttpRequest.BodyPublishers.ofString(payload))
                    .build();
        } catch (GeneralSecurityException e) {
            return CompletableFuture.completedFuture(new Result(0, null, null, null, e.toString()));
        }
        return client.sendAsync(request, HttpResponse.BodyHandlers.ofString())
                .handle((response, failure) -> {
                    if (failure != null) {
                        Throwable cause = failure.getCause() != null ? failure.getCause() : failure;
                        return new Result(0, null, null, null, cause.toString());
                    }
                    String body = response.body();
                    String timestamp = find(body, "\"timestamp\"\\s*:\\s*(\\d+)");
                    return new Result(response.statusCode(),
                            response.headers().firstValue("apns-id").orElse(null),
                            find(body, "\"reason\"\\s*:\\s*\"([^\"]*)\""),
                            timestamp == null ? null : Long.valueOf(timestamp),
                            null);
                });
    }

    /** Error bodies are tiny ({"reason":"…","timestamp":…}); a regular expression will do. */
    static String find(String text, String regex) {
        if (text == null) return null;
        Matcher m = Pattern.compile(regex).matcher(text);
        return m.find() ? m.group(1) : null;
    }

    static String alert(String lib, String kase, int n) {
        return "{\"aps\":{\"alert\":{\"title\":\"compat\",\"body\":\"" + kase + " #" + n + "\"}},"
                + "\"compat\":{\"lib\":\"" + lib + "\",\"case\":\"" + kase + "\",\"n\":" + n + "}}";
    }

    static String background(String lib, String kase, int n) {
        return "{\"aps\":{\"content-available\":1},"
                + "\"compat\":{\"lib\":\"" + lib + "\",\"case\":\"" + kase + "\",\"n\":" + n + "}}";
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }

    static String line(String kase, int n, Result r) {
        return "{\"case\":" + json(kase) + ",\"n\":" + n
                + ",\"status\":" + (r.status() == 0 ? "null" : Integer.toString(r.status()))
                + ",\"reason\":" + json(r.reason())
                + ",\"apnsId\":" + json(r.apnsId())
                + ",\"timestamp\":" + (r.timestamp() == null ? "null" : r.timestamp().toString())
                + ",\"error\":" + json(r.error()) + "}";
    }

    public static void main(String[] args) throws Exception {
        Properties job = new Properties();
        try (Reader in = Files.newBufferedReader(Path.of(args[0]))) {
            job.load(in);
        }
        String lib = job.getProperty("lib");
        ApnsProvider apns = new ApnsProvider(job.getProperty("teamId"), job.getProperty("keyId"),
                Path.of(job.getProperty("keyPath")), job.getProperty("topic"),
                Duration.ofSeconds(Long.parseLong(job.getProperty("timeoutSeconds"))));
        String sandboxToken = job.getProperty("token.sandbox");
        String productionToken = job.getProperty("token.production");

        // One at a time. The first push also warms the client: it opens the connection and
        // authenticates it, after which the server allows 1000 concurrent streams on it.
        System.out.println(line("alert", 0,
                apns.send(SANDBOX, sandboxToken, "alert", 10, alert(lib, "alert", 0)).join()));
        if ("alert".equals(job.getProperty("only"))) {
            System.exit(0); // run.py's check that the trust store is what lets it connect
        }
        System.out.println(line("background", 1,
                apns.send(SANDBOX, sandboxToken, "background", 5, background(lib, "background", 1)).join()));
        System.out.println(line("wrong-environment", 2,
                apns.send(SANDBOX, productionToken, "alert", 10, alert(lib, "wrong-environment", 2)).join()));
        System.out.println(line("unregistered", 3,
                apns.send(SANDBOX, job.getProperty("token.unregistered"), "alert", 10,
                        alert(lib, "unregistered", 3)).join()));
        System.out.println(line("production", 4,
                apns.send(PRODUCTION, productionToken, "alert", 10, alert(lib, "production", 4)).join()));

        // The burst: every push in flight at once, multiplexed on the warm connection.
        String[] burst = job.getProperty("burst.tokens").split(",");
        long started = System.nanoTime();
        List<CompletableFuture<String>> lines = new ArrayList<>();
        for (int i = 0; i < burst.length; i++) {
            int n = 5 + i;
            lines.add(apns.send(SANDBOX, burst[i], "alert", 10, alert(lib, "burst", n))
                    .thenApply(r -> line("burst", n, r)));
        }
        CompletableFuture.allOf(lines.toArray(new CompletableFuture[0])).join();
        double seconds = (System.nanoTime() - started) / 1e9;
        for (CompletableFuture<String> l : lines) System.out.println(l.join());
        System.out.println(String.format(Locale.ROOT, "{\"case\":\"summary\",\"burstSeconds\":%.3f,\"version\":\"JDK %s\"}",
                seconds, System.getProperty("java.version")));
        System.out.flush();
        System.exit(0);
    }
}
