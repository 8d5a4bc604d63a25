/// Fault injection (README, "Faults"): an ordered list of rules; the first rule that matches
/// a request and decides to fire acts on it. Off until rules are added.
public struct FaultInjectionRule: Sendable {
    public var id: String
    public var match: FaultMatch
    public var action: FaultAction
    /// Fire at most this many times (then the rule stays but does nothing).
    public var times: Int?
    /// Let this many matching requests through before firing.
    public var after: Int
    /// Fire with this probability (0…1). With a `seed`, the n-th matching request's draw is
    /// a function of the seed and n alone, so the pattern is the same on every run, on
    /// every instance sharing the rule (`--redis`: its counts are shared) and after a restart
    /// (`--state-dir` keeps the counts): it goes on where it was, not from the start.
    public var probability: Double?
    public var seed: UInt64?
    /// Requests that matched, and how many of them the rule acted on.
    public private(set) var matched = 0
    public private(set) var fired = 0
    private var random: FastRandom

    public init(
        id: String, match: FaultMatch, action: FaultAction, times: Int? = nil, after: Int = 0,
        probability: Double? = nil, seed: UInt64? = nil
    ) {
        self.id = id
        self.match = match
        self.action = action
        self.times = times
        self.after = after
        self.probability = probability
        self.seed = seed
        random = FastRandom()
    }

    /// Puts back the counters of a persisted or shared rule (`--state-dir`, `--redis`).
    public mutating func restoreCounts(matched: Int, fired: Int) {
        self.matched = matched
        self.fired = fired
    }

    /// Counts a matching request and says whether the rule fires for it.
    mutating func consider() -> Bool {
        matched += 1
        if matched <= after { return false }
        if let times, fired >= times { return false }
        if let probability {
            let bits = seed.map { FastRandom.mixed($0, UInt64(matched)) } ?? random.next()
            let draw = Double(bits >> 11) / Double(1 << 53)
            if draw >= probability { return false }
        }
        fired += 1
        return true
    }
}

/// What a rule looks at; nil fields match anything.
public struct FaultMatch: Sendable, Equatable {
    public var token: String?
    public var topic: String?
    public var pushType: String?
    public var priority: Int?
    public var environment: APNsEnvironment?
    public var connectionID: UInt64?

    /// Matches every request; set the fields that must match.
    public init() {}

    func matches(_ facts: FaultFacts) -> Bool {
        if let token, !Hex.equalIgnoringCase(token, facts.token) { return false }
        if let topic, topic != facts.topic { return false }
        if let pushType, pushType != facts.pushType { return false }
        if let priority, priority != facts.priority { return false }
        if let environment, environment != facts.environment { return false }
        if let connectionID, connectionID != facts.connectionID { return false }
        return true
    }
}

/// The request facts rules match on.
public struct FaultFacts: Sendable {
    public var token: String
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var environment: APNsEnvironment
    public var connectionID: UInt64
}

/// What a firing rule does. `delayMs`/`jitterMs` hold the answer back (and may combine with
/// an answer); the other fields are mutually exclusive.
public struct FaultAction: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Only the delay: the request is judged normally.
        case none
        /// Answer with this status and reason instead of judging the request.
        case respond(status: Int, reason: String)
        /// Reset the stream (RST_STREAM with this HTTP/2 error code).
        case resetStream(errorCode: UInt32)
        /// End the connection with GOAWAY (`{"reason":…}` as debug data when given).
        case goAway(reason: String?, lastStreamID: Int32?, errorCode: UInt32)
        /// Close the TCP connection without a word.
        case closeConnection
        /// Send SETTINGS with this MAX_CONCURRENT_STREAMS (as APNs does after errors), then judge normally.
        case maxConcurrentStreams(UInt32)
    }

    public var kind: Kind
    public var delayMs: Int
    public var jitterMs: Int

    public init(kind: Kind, delayMs: Int = 0, jitterMs: Int = 0) {
        self.kind = kind
        self.delayMs = delayMs
        self.jitterMs = jitterMs
    }
}

/// A decided fault for one request: the rule and the delay drawn for it.
public struct FiredFault: Sendable, Equatable {
    public var ruleID: String
    public var action: FaultAction
    public var delayMs: Int
    /// The push type the rule matched on (header, topic suffix or alert), for the record.
    public var pushType: String? = nil
}

public struct FaultRules: Sendable {
    /// Rules kept at most: every push is matched against the list in order, so it stays short
    /// enough to cost a push little (20,000 rules made one 17 times slower).
    public static let maxRules = 1000

    public private(set) var rules: [FaultInjectionRule] = []
    /// The number in the id of the next rule added without one (`f1`, `f2`, …).
    public private(set) var nextNumber = 1
    private var jitter = FastRandom(seed: 0x5EED)
    /// With persistence on: the list or a counter changed since `takeChanged`.
    public var tracksChanges = false
    private var changed = false

    public init() {}

    /// Rules as persisted (`--state-dir`).
    public init(_ snapshot: FaultRulesSnapshot) {
        rules = snapshot.rules
        nextNumber = snapshot.nextNumber
    }

    public var snapshot: FaultRulesSnapshot { FaultRulesSnapshot(rules: rules, nextNumber: nextNumber) }

    public mutating func takeChanged() -> Bool {
        defer { changed = false }
        return changed
    }

    private mutating func noteChange() { if tracksChanges { changed = true } }

    public var isEmpty: Bool { rules.isEmpty }

    public func contains(id: String) -> Bool { rules.contains { $0.id == id } }

    /// Adds a rule at the end (or at `index`); gives it an id when it has none, skipping ids a
    /// client chose. Nil (and nothing added) when its id is taken: GET and DELETE by id would
    /// reach only one of the two.
    @discardableResult
    public mutating func add(_ rule: FaultInjectionRule, at index: Int? = nil) -> String? {
        var rule = rule
        if rule.id.isEmpty {
            repeat {
                rule.id = "f\(nextNumber)"
                nextNumber += 1
            } while contains(id: rule.id)
        } else if contains(id: rule.id) {
            return nil
        }
        if let index, index >= 0, index < rules.count { rules.insert(rule, at: index) } else { rules.append(rule) }
        noteChange()
        return rule.id
    }

    @discardableResult
    public mutating func remove(id: String) -> Bool {
        guard let index = rules.firstIndex(where: { $0.id == id }) else { return false }
        rules.remove(at: index)
        noteChange()
        return true
    }

    public mutating func removeAll() {
        rules.removeAll()
        noteChange()
    }

    /// The first rule that matches and fires, in order.
    public mutating func evaluate(_ facts: FaultFacts) -> FiredFault? {
        for index in rules.indices where rules[index].match.matches(facts) {
            noteChange()  // the rule's counters moved
            if rules[index].consider() {
                let action = rules[index].action
                let spread = action.jitterMs > 0 ? Int(jitter.next() % UInt64(action.jitterMs + 1)) : 0
                return FiredFault(ruleID: rules[index].id, action: action, delayMs: action.delayMs + spread)
            }
        }
        return nil
    }
}

/// Fault rules changed at run time (the admin API).
extension World {
    /// Adds the rule at the end (or at `index`); returns its id, nil when that id is taken.
    public mutating func addFault(_ rule: FaultInjectionRule, at index: Int?) -> String? { faults.add(rule, at: index) }

    /// False when no rule has that id. Its `/metrics` series goes with it: a suite that adds and
    /// deletes a rule per test would otherwise grow a series per rule for good.
    public mutating func removeFault(id: String) -> Bool {
        guard faults.remove(id: id) else { return false }
        counters.forgetFaults(id)
        return true
    }

    public mutating func removeAllFaults() {
        faults.removeAll()
        counters.forgetFaults(nil)
    }
}
