//! NATS decentralised auth (operator mode) made in the test, without `nsc`: an operator, its
//! system account, an account with JetStream, and `.creds` files of users of that account. The
//! JWTs are the nats-jwt v2 layout (header `{"typ":"JWT","alg":"ed25519-nkey"}`, claims with
//! `iss`/`sub` public nkeys and a `nats` object of the claim type), base64url without padding,
//! signed with the issuer's ed25519 nkey over `header.claims`.
//!
//! Included with `#[path]` by the test files that need it.
#![allow(dead_code)]

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde_json::{json, Value};

/// No limit, in a JWT's limits.
const NO_LIMIT: i64 = -1;

/// An operator that trusts one account with JetStream (and a system account).
pub struct Operator {
    operator: KeyPair,
    system: KeyPair,
    account: KeyPair,
}

impl Operator {
    /// Fresh keys for the operator and both accounts.
    pub fn new() -> Operator {
        Operator {
            operator: KeyPair::new_operator(),
            system: KeyPair::new_account(),
            account: KeyPair::new_account(),
        }
    }

    /// The nats-server config of operator mode: the operator JWT, the system account, and both
    /// account JWTs preloaded into a memory resolver (`-js` on the command line enables
    /// JetStream; the account's JetStream limits let it use it).
    pub fn server_config(&self) -> String {
        let operator = self.operator.public_key();
        let operator_jwt = encode(
            "caprl-test-operator",
            &operator,
            &self.operator,
            json!({
                "system_account": self.system.public_key(),
                "type": "operator",
                "version": 2,
            }),
        );
        let system_jwt = self.account_jwt("SYS", &self.system, false);
        let account_jwt = self.account_jwt("caprl", &self.account, true);
        format!(
            "operator: {operator_jwt:?}\n\
             system_account: {:?}\n\
             resolver: MEMORY\n\
             resolver_preload: {{\n  {:?}: {system_jwt:?}\n  {:?}: {account_jwt:?}\n}}\n",
            self.system.public_key(),
            self.system.public_key(),
            self.account.public_key(),
        )
    }

    /// A `.creds` file's text for a new user of the JetStream account, allowed everything.
    pub fn user_creds(&self) -> String {
        let user = KeyPair::new_user();
        let jwt = encode(
            "caprl-user",
            &user.public_key(),
            &self.account,
            json!({
                "pub": {},
                "sub": {},
                "subs": NO_LIMIT,
                "data": NO_LIMIT,
                "payload": NO_LIMIT,
                "type": "user",
                "version": 2,
            }),
        );
        creds(&jwt, &user.seed().expect("a generated user key has a seed"))
    }

    fn account_jwt(&self, name: &str, account: &KeyPair, jetstream: bool) -> String {
        let mut limits = json!({
            "subs": NO_LIMIT,
            "data": NO_LIMIT,
            "payload": NO_LIMIT,
            "imports": NO_LIMIT,
            "exports": NO_LIMIT,
            "wildcards": true,
            "conn": NO_LIMIT,
            "leaf": NO_LIMIT,
        });
        if jetstream {
            // Non-zero memory or disk storage is what enables JetStream for the account.
            for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
                limits[key] = json!(NO_LIMIT);
            }
        }
        encode(
            name,
            &account.public_key(),
            &self.operator,
            json!({
                "limits": limits,
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            }),
        )
    }
}

/// A JWT of `subject` named `name`, with the claim type's `nats` object, signed by `issuer`.
fn encode(name: &str, subject: &str, issuer: &KeyPair, nats: Value) -> String {
    let issued_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let claims = json!({
        "jti": BASE32_NOPAD.encode(&rand::random::<[u8; 32]>()),
        "iat": issued_at,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let part = |v: &Value| BASE64URL_NOPAD.encode(v.to_string().as_bytes());
    let signed = format!("{}.{}", part(&header), part(&claims));
    let signature = issuer
        .sign(signed.as_bytes())
        .expect("an nkey with a seed signs");
    format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
}

/// The standard `.creds` file layout (what `nsc generate creds` writes): the user JWT and the
/// user's nkey seed, each between its markers.
fn creds(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}
