import { errors } from "jose";
import { ApiError, type JwtRefusal } from "./errors";

/** The 401 of a refused shopper JWT; `claim` names the claim at fault for the claim reasons. */
export function jwtRefused(reason: JwtRefusal, message: string, claim?: string): ApiError {
  return new ApiError("UNAUTHENTICATED", message, {}, claim === undefined ? { reason } : { reason, claim });
}

/** A claim name as jose reports it, kept to what a JWT claim name looks like (it is echoed). */
const claimName = (claim: string) => (/^[A-Za-z0-9_]{1,32}$/.test(claim) ? claim : "unknown");

/** The refusal of an error `jwtVerify` (or the key lookup) threw; `accepted`: the algorithms configured. */
export function refusalOf(err: unknown, accepted: readonly string[]): ApiError {
  if (err instanceof errors.JWTExpired) {
    return jwtRefused("expired", "The JWT has expired (its `exp` is past): sign in again for a new one.", "exp");
  }
  if (err instanceof errors.JWTClaimValidationFailed) {
    const claim = claimName(err.claim);
    if (err.reason === "missing") {
      return jwtRefused("missing_claim", `The JWT has no \`${claim}\` claim, which is required.`, claim);
    }
    // A time claim in the future; one that is no number at all is `invalid`, below.
    if ((claim === "nbf" || claim === "iat") && err.reason === "check_failed") {
      return jwtRefused("not_yet_valid", `The JWT is not valid yet (its \`${claim}\` is in the future).`, claim);
    }
    if (err.reason === "invalid") {
      return jwtRefused("invalid_claim", `The JWT's \`${claim}\` claim must be a number (seconds since 1970).`, claim);
    }
    return jwtRefused("invalid_claim", `The JWT's \`${claim}\` claim is not one this service accepts.`, claim);
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) {
    return jwtRefused("bad_signature", "The JWT's signature does not verify: it was signed with another key.");
  }
  if (err instanceof errors.JWKSNoMatchingKey) {
    return jwtRefused(
      "unknown_key",
      "No key of the identity provider matches the JWT's `kid` and algorithm (a key that is not, or no longer, published).",
    );
  }
  if (err instanceof errors.JOSEAlgNotAllowed) {
    return jwtRefused(
      "algorithm_not_allowed",
      `The JWT's signing algorithm (\`alg\`) is not accepted here (accepted: ${accepted.join(", ")}).`,
    );
  }
  return jwtRefused("malformed", "The bearer token is not a well-formed JWT (three base64url parts of JSON).");
}
