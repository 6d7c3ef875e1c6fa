// Calendar days in IANA zones, as engage's clock reads them (chrono-tz there, Intl here).
const formats = new Map()

function format (zone) {
  let f = formats.get(zone)
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric',
      hour: 'numeric', minute: 'numeric', second: 'numeric'
    })
    formats.set(zone, f)
  }
  return f
}

export function validZone (zone) {
  try { format(zone); return true } catch { return false }
}

// The calendar date in `zone` at epoch ms `at`: { y, m, d } (m and d from 1).
export function dateIn (zone, at) {
  if (zone === 'UTC') {
    const t = new Date(at)
    return { y: t.getUTCFullYear(), m: t.getUTCMonth() + 1, d: t.getUTCDate() }
  }
  const parts = {}
  for (const { type, value } of format(zone).formatToParts(at)) parts[type] = Number(value)
  return { y: parts.year, m: parts.month, d: parts.day }
}

// The zone's offset from UTC at `at`, in ms.
function offsetAt (zone, at) {
  if (zone === 'UTC') return 0
  const p = {}
  for (const { type, value } of format(zone).formatToParts(at)) p[type] = Number(value)
  return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) - Math.floor(at / 1000) * 1000
}

// The instant a day begins in `zone`, epoch ms.
export function startOfIn (zone, date) {
  const local = Date.UTC(date.y, date.m - 1, date.d)
  const first = local - offsetAt(zone, local)
  return local - offsetAt(zone, first)
}

export const dayNumber = (date) => date.y * 10_000 + date.m * 100 + date.d
export const dateOfDayNumber = (n) => ({ y: Math.floor(n / 10_000), m: Math.floor(n / 100) % 100, d: n % 100 })
export const monthId = (date) => date.y * 100 + date.m
export const previousMonth = ({ y, m }) => (m === 1 ? { y: y - 1, m: 12, d: 1 } : { y, m: m - 1, d: 1 })
export const epochDay = (date) => Date.UTC(date.y, date.m - 1, date.d) / 86_400_000
export const isoDate = (date) =>
  `${String(date.y).padStart(4, '0')}-${String(date.m).padStart(2, '0')}-${String(date.d).padStart(2, '0')}`
export const compareDates = (a, b) => dayNumber(a) - dayNumber(b)
export const dayBefore = (date) => {
  const t = new Date(Date.UTC(date.y, date.m - 1, date.d) - 86_400_000)
  return { y: t.getUTCFullYear(), m: t.getUTCMonth() + 1, d: t.getUTCDate() }
}
