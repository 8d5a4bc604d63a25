#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
// OpenSSL headers plus small inline wrappers for the macros Swift cannot call.
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bn.h>
#include <openssl/rand.h>
#include <openssl/core_names.h>

// --- BIO ---------------------------------------------------------------
// BIO_get_mem_data is a macro over BIO_ctrl with a char** smuggled as char*.
static inline long copenssl_BIO_get_mem_data(BIO *bio, char **contents) {
    return BIO_get_mem_data(bio, contents);
}

// --- SSL_CTX / SSL ctrl macros -----------------------------------------
static inline int copenssl_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
static inline long copenssl_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
static inline long copenssl_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, int (*callback)(SSL *, int *, void *)) {
    return SSL_CTX_set_tlsext_servername_callback(ctx, callback);
}
static inline int copenssl_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

// SSL_OP_* are defined through a casting macro (SSL_OP_BIT) the Swift
// importer cannot evaluate, so expose the ones we use as functions.
static inline uint64_t copenssl_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t copenssl_SSL_OP_CIPHER_SERVER_PREFERENCE(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }

#endif
