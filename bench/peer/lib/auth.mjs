// The bearer check engage makes (src/infra/auth): HS256 with the shared secret, `exp` and
// `sub` required, 5 s of leeway, other algorithms refused; a verified token is remembered
// for 60 s (100,000 kept), as engage's TtlCache does, with `exp` checked on every use.
import { createVerifier } from 'fast-jwt'

const LEEWAY_SECONDS = 5
const MAX_TOKEN_CACHED = 4096

export class Unauthenticated extends Error {}

export function tokenVerifier (secret) {
  const verify = createVerifier({
    key: secret,
    algorithms: ['HS256'],
    requiredClaims: ['exp', 'sub'],
    clockTolerance: LEEWAY_SECONDS * 1000,
    cache: 100_000,
    cacheTTL: 60_000
  })
  const reason = (error) => ({
    FAST_JWT_EXPIRED: 'token expired',
    FAST_JWT_INVALID_SIGNATURE: 'token signature is invalid',
    FAST_JWT_INVALID_ALGORITHM: 'token algorithm does not match its key',
    FAST_JWT_MISSING_REQUIRED_CLAIM: 'token lacks a required claim',
    FAST_JWT_INACTIVE: 'token is not valid yet (nbf)'
  })[error.code] ?? 'token is malformed'

  // The viewer of an `Authorization` header: null without one, else { userId, role, zone }.
  return function viewerOf (header) {
    const value = header?.trim()
    if (!value) return null
    let token
    if (value.startsWith('Bearer ') || value.startsWith('bearer ')) token = value.slice(7).trim()
    else throw new Unauthenticated('authorization must be `Bearer <token>`')
    if (token.length > MAX_TOKEN_CACHED * 16) throw new Unauthenticated('token is malformed')
    let claims
    try {
      claims = verify(token)
    } catch (error) {
      throw new Unauthenticated(reason(error))
    }
    // Cached verifications are checked for expiry again (engage's `check_times`).
    if (typeof claims.exp !== 'number' || claims.exp + LEEWAY_SECONDS < Date.now() / 1000) {
      throw new Unauthenticated('token expired')
    }
    const sub = claims.sub
    // A user id written the one way engage writes ids; other subjects name users of an
    // identity provider, which the peer does not map.
    if (typeof sub !== 'string' || !/^[1-9][0-9]{0,18}$/.test(sub) || BigInt(sub) >= 1n << 63n) {
      throw new Unauthenticated('token subject is not a user id')
    }
    const role = ['user', 'service', 'admin'].includes(claims.role) ? claims.role : 'user'
    const zone = typeof claims.zoneinfo === 'string' && claims.zoneinfo.length <= 64 ? claims.zoneinfo : null
    return { userId: sub, role, zone }
  }
}
