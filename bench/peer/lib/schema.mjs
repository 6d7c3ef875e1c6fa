// The part of engage's schema.graphql the bench's four operations use, field for field as
// engage declares them (descriptions left out); fields whose reads the peer does not make
// (a remark's likers, a user's follows and points, a sign-in's calendars) are left out too.
import mercurius from 'mercurius'
const { ErrorWithProps } = mercurius
import { localId } from './ids.mjs'
import { placeholder } from './users.mjs'

export const schema = `
interface Node {
  id: ID!
}

scalar DateTime
scalar Date

type Query {
  remarks(itemId: ID!, first: Int, after: String, last: Int, before: String): RemarkConnection!
  leaderboard(seasonId: ID, first: Int = 20, offset: Int = 0): Leaderboard!
}

type Mutation {
  likeRemark(remarkId: ID!): LikeResult!
  signIn: SignInResult!
}

type RemarkConnection {
  edges: [RemarkEdge!]!
  pageInfo: PageInfo!
}

type RemarkEdge {
  cursor: String!
  node: Remark!
}

type Remark implements Node {
  id: ID!
  itemId: ID!
  author: User!
  score: Int!
  content: String!
  images: [String!]!
  createdAt: DateTime!
  editedAt: DateTime
  likeCount: Int!
  likedByMe: Boolean!
}

type PageInfo {
  hasNextPage: Boolean!
  hasPreviousPage: Boolean!
  startCursor: String
  endCursor: String
}

type User implements Node {
  id: ID!
  name: String!
  avatarUrl: String
  bio: String
}

type LikeResult {
  remarkId: ID! @deprecated(reason: "Use \`remark { id }\`.")
  likeCount: Int! @deprecated(reason: "Use \`remark { likeCount }\`.")
  liked: Boolean! @deprecated(reason: "Use \`remark { likedByMe }\`.")
  changed: Boolean!
}

type SignInResult {
  date: Date!
  streak: Int! @deprecated(reason: "Use \`streak { current }\`.")
  pointsAwarded: Int!
  alreadySigned: Boolean!
}

type Leaderboard {
  season: Season!
  me: RankEntry
  entries: [RankEntry!]!
  total: Int!
}

type RankEntry {
  rank: Int!
  points: Int!
  user: User!
}

type Season implements Node {
  id: ID!
  name: String!
  beginsAt: DateTime!
  endsAt: DateTime!
  current: Boolean!
}
`

const PAGE_DEFAULT = 20
const PAGE_MAX = 100

function signedIn (ctx) {
  if (!ctx.viewer) throw new ErrorWithProps('sign in first', { code: 'UNAUTHENTICATED' })
  return ctx.viewer
}

function pageFirst (first, last, before) {
  if (last != null || before != null) {
    throw new ErrorWithProps('the peer pages forward only (first, after)', { code: 'BAD_USER_INPUT' })
  }
  const n = first ?? PAGE_DEFAULT
  if (!(n >= 1 && n <= PAGE_MAX)) {
    throw new ErrorWithProps(`first must be between 1 and ${PAGE_MAX}, got ${n}`, { code: 'BAD_USER_INPUT' })
  }
  return n
}

function cursorId (after) {
  if (after == null) return null
  const m = /^c([0-9]{1,19})$/.exec(after)
  if (!m) throw new ErrorWithProps(`${JSON.stringify(after.slice(0, 32))} is not a cursor`, { code: 'BAD_USER_INPUT' })
  return m[1]
}

export function resolvers ({ remarks, users, signIn, leaderboard }) {
  return {
    Query: {
      async remarks (_, { itemId, first, after, last, before }, ctx) {
        const n = pageFirst(first, last, before)
        const page = await remarks.page(localId('Item', itemId), n, cursorId(after))
        const viewer = ctx.viewer?.userId ?? null
        const ids = page.remarks.map((r) => r.id)
        const [likes, authors] = await Promise.all([
          ids.length > 0 ? remarks.likeInfos(viewer, ids) : new Map(),
          // Authors without a user row load as engage's UserLoader would.
          page.remarks.some((r) => !r.author) ? users.findMany(page.remarks.filter((r) => !r.author).map((r) => r.authorId)) : null
        ])
        const edges = page.remarks.map((r) => {
          const like = likes.get(r.id)
          return {
            cursor: `c${r.id}`,
            node: {
              ...r.node,
              author: r.author ?? authors.get(r.authorId) ?? placeholder(r.authorId),
              likeCount: like.likeCount,
              likedByMe: viewer != null && like.likedByMe
            }
          }
        })
        return {
          edges,
          pageInfo: {
            hasNextPage: page.more,
            hasPreviousPage: after != null,
            startCursor: edges.length ? edges[0].cursor : null,
            endCursor: edges.length ? edges[edges.length - 1].cursor : null
          }
        }
      },
      async leaderboard (_, { seasonId, first, offset }, ctx) {
        if (seasonId != null) {
          throw new ErrorWithProps('the peer reads the current season only', { code: 'BAD_USER_INPUT' })
        }
        return leaderboard.page(ctx.viewer?.userId ?? null, first ?? PAGE_DEFAULT, offset ?? 0)
      }
    },
    Mutation: {
      likeRemark (_, { remarkId }, ctx) {
        return remarks.likeRemark(signedIn(ctx).userId, localId('Remark', remarkId))
      },
      signIn (_, __, ctx) {
        const viewer = signedIn(ctx)
        return signIn.signIn(viewer.userId, viewer.zone)
      }
    }
  }
}
