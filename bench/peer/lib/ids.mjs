// Global ids as engage writes them (src/api/schema/id.rs): standard padded base64 of
// `Type:local`; an argument also takes the bare local id (deprecated in engage, still read).
import mercurius from 'mercurius'
const { ErrorWithProps } = mercurius

const EPOCH_SECONDS = 1_672_531_200n // engage's ids: seconds since 2023-01-01 << 32 | sequence
const MAX_I64 = (1n << 63n) - 1n

export function globalId (type, local) {
  return Buffer.from(`${type}:${local}`).toString('base64')
}

function positive (text) {
  if (!/^[0-9]{1,19}$/.test(text)) return null
  const value = BigInt(text)
  return value > 0n && value <= MAX_I64 ? value.toString() : null
}

// The local id of an argument of `type`, or a BAD_USER_INPUT error.
export function localId (type, value) {
  const text = String(value)
  const bare = positive(text)
  if (bare) return bare
  const decoded = Buffer.from(text, 'base64').toString('utf8')
  if (decoded.startsWith(`${type}:`)) {
    const local = positive(decoded.slice(type.length + 1))
    if (local) return local
  }
  throw new ErrorWithProps(`${JSON.stringify(text)} is not a ${type} id`, { code: 'BAD_USER_INPUT' })
}

// When an id was made, epoch ms (to the second).
export function timestampMsOf (id) {
  return Number(((BigInt(id) >> 32n) + EPOCH_SECONDS) * 1000n)
}
