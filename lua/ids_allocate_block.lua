--[[
  Reserves a block of sequence numbers for the global ID generator.

  Input:
    KEYS[1] sequence: sequence key of one UTC day     e.g. engage:{ids}:seq:20261123
    ARGV[1] block_size: block size (>= 1)
    ARGV[2] ttl_seconds: lifetime of the day key in seconds (longer than a day, so that a
            clock near midnight never sees a recreated key)

  Output:
    the last number of the block; the block is [last - size + 1, last]

  Why a script: INCRBY and EXPIRE must happen together, or a crash between them
  would leave a sequence key that never expires.
]]
local last = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2], 'NX')
return last
