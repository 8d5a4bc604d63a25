@testable import APNsCore
import HTTPGrammar
import Testing

/// Ids kept as bits until read as text (`PushID`): their text is what the Strings made on every
/// push were, and what is stored or replicated of them has not changed.
@Suite("Push ids")
struct PushIDTests {
    /// 8-4-4-4-12 hex of `high` then `low`, made another way than `UUIDText` does.
    static func reference(_ high: UInt64, _ low: UInt64, uppercase: Bool) -> String {
        func hex(_ word: UInt64) -> String {
            let digits = String(word, radix: 16, uppercase: uppercase)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        let all = Array(hex(high) + hex(low))
        return [all[0..<8], all[8..<12], all[12..<16], all[16..<20], all[20..<32]].map { String($0) }.joined(separator: "-")
    }

    static let words: [(UInt64, UInt64)] = [
        (0, 0), (.max, .max), (0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210), (0xA, 0xB0_0000_0000_0000),
        (0x8000_0000_0000_0001, 0x1),
    ]

    @Test func drawnIdsReadAsTheUUIDTextOfTheirBitsInTheirCase() {
        for (high, low) in Self.words {
            let upper = PushID(high: high, low: low, uppercase: true)
            let lower = PushID(high: high, low: low, uppercase: false)
            #expect(upper.text == Self.reference(high, low, uppercase: true))
            #expect(lower.text == Self.reference(high, low, uppercase: false))
            #expect(upper.optionalText == upper.text)
            #expect(upper.byteCount == 36 && lower.byteCount == 36)
            #expect(upper.exists)
            #expect(upper.drawn.map { [$0.high, $0.low] } == [high, low] && upper.drawn?.uppercase == true)
            #expect(lower.drawn?.uppercase == false)
            #expect(upper.givenText == nil)
            #expect(UUIDText.bits(of: upper.text.utf8).map { [$0.high, $0.low] } == [high, low])
            #expect(UUIDText.bits(of: lower.text.utf8).map { [$0.high, $0.low] } == [high, low])
        }
    }

    @Test func theGeneratorDrawsIdsAsItFormattedThemBefore() {
        var random = FastRandom(seed: 42)
        var same = FastRandom(seed: 42)
        for _ in 0..<100 {
            let apnsID = random.apnsID()
            let high = same.next()
            #expect(apnsID.text == Self.reference(high, same.next(), uppercase: true))
            // APNs' ids carry no version bits; apns-unique-id is a version 4 UUID.
            let uniqueID = random.uniquePushID()
            let uniqueHigh = (same.next() & ~0xF000) | 0x4000
            let uniqueLow = (same.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
            #expect(uniqueID.text == Self.reference(uniqueHigh, uniqueLow, uppercase: false))
            #expect(random.uniqueID() == same.uniquePushID().text)
        }
    }

    @Test func aGivenIdIsKeptAsItCame() {
        for text in ["4a5b6c7d-1111-2222-3333-444455556666", "4A5B6C7D-1111-2222-3333-44445555666f", "not a uuid", "é", ""] {
            let id = PushID(text)
            #expect(id.text == text)
            #expect(id.optionalText == text)
            #expect(id.givenText == text)
            #expect(id.drawn == nil)
            #expect(id.byteCount == text.utf8.count)
            #expect(id.exists)
        }
    }

    @Test func noneHasNoText() {
        #expect(!PushID.none.exists)
        #expect(PushID.none.optionalText == nil)
        #expect(PushID.none.text == "")
        #expect(PushID.none.byteCount == 0)
        #expect(!PushID.none.matches(ignoringCase: ""))
    }

    @Test func idsMatchTheirTextInEitherCase() {
        let drawn = PushID(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210, uppercase: true)
        #expect(drawn.matches(ignoringCase: "01234567-89AB-CDEF-FEDC-BA9876543210"))
        #expect(drawn.matches(ignoringCase: "01234567-89ab-cdef-fedc-ba9876543210"))
        #expect(drawn.matches(ignoringCase: "01234567-89aB-cDeF-fEdC-bA9876543210"))
        for other in [
            "01234567-89AB-CDEF-FEDC-BA9876543211", "01234567-89AB-CDEF-FEDCBA9876543210", "01234567-89AB-CDEF-FEDC-BA987654321",
            "01234567-89AB-CDEF-FEDC-BA98765432100", "0123456789AB-CDEF-FEDC-BA98765432-10", "01234567-89AG-CDEF-FEDC-BA9876543210", "",
        ] {
            #expect(!drawn.matches(ignoringCase: other), "\(other)")
        }
        let given = PushID("4a5b6c7d-1111-2222-3333-44445555666F")
        #expect(given.matches(ignoringCase: "4A5B6C7D-1111-2222-3333-44445555666f"))
        #expect(!given.matches(ignoringCase: "4A5B6C7D-1111-2222-3333-444455556660"))
    }

    /// The journal's filters compare an id's text lower-cased with the query lower-cased.
    @Test func filtersFindAnIdAsItsLowerCasedText() {
        var random = FastRandom(seed: 3)
        for id in [random.apnsID(), random.uniquePushID(), PushID("4A5b6C7d-1111-2222-3333-44445555666F"), PushID("Given Text")] {
            #expect(id.lowercasedText(is: id.text.lowercased()))
            #expect(!id.lowercasedText(is: id.text.uppercased()) || id.text.uppercased() == id.text.lowercased())
            #expect(!id.lowercasedText(is: id.text.lowercased() + "0"))
            #expect(!id.lowercasedText(is: ""))
        }
        #expect(!PushID.none.lowercasedText(is: ""))
        #expect(PushID("").lowercasedText(is: ""))

        var query = NotificationQuery()
        var record = NotificationRecord(apnsID: random.apnsID(), token: "ab", environment: .sandbox, receivedAtMs: 1)
        record.uniquePushID = random.uniquePushID()
        query.apnsID = record.apnsID.lowercased()
        #expect(query.matches(record))
        query.apnsID = record.uniqueID
        #expect(!query.matches(record))
        query.apnsID = nil
        query.uniqueID = record.uniqueID!.uppercased()
        #expect(query.matches(record))
        record.uniquePushID = .none
        #expect(!query.matches(record))
    }

    /// A record with drawn ids is stored and replicated as the same bytes as one whose ids are
    /// the same text: old state directories and other instances read it as before.
    @Test func storedBytesAreThoseOfTheText() throws {
        var random = FastRandom(seed: 7)
        var drawn = NotificationRecord(apnsID: random.apnsID(), token: "ab", environment: .sandbox, receivedAtMs: 1)
        drawn.uniquePushID = random.uniquePushID()
        var asText = NotificationRecord(apnsID: drawn.apnsID, token: "ab", environment: .sandbox, receivedAtMs: 1)
        asText.uniqueID = drawn.uniqueID
        #expect(StateCodec.encode(drawn) == StateCodec.encode(asText))
        #expect(drawn.approximateBytes == asText.approximateBytes)
        let decoded = try StateCodec.decodeRecord(StateCodec.encode(drawn))
        #expect(decoded.apnsID == drawn.apnsID)
        #expect(decoded.uniqueID == drawn.uniqueID)

        var production = drawn
        production.uniquePushID = .none
        var productionText = asText
        productionText.uniqueID = nil
        #expect(StateCodec.encode(production) == StateCodec.encode(productionText))
        #expect(try StateCodec.decodeRecord(StateCodec.encode(production)).uniqueID == nil)

        var notification = PendingNotification.blank
        notification.apnsPushID = drawn.apnsPushID
        var notificationText = PendingNotification.blank
        notificationText.apnsID = drawn.apnsID
        #expect(StateCodec.encode(notification) == StateCodec.encode(notificationText))
        #expect(try StateCodec.decodeNotification(StateCodec.encode(notification)).apnsID == drawn.apnsID)
    }

    @Test func theJournalFindsARecordByEitherIdInEitherCase() {
        var random = FastRandom(seed: 9)
        var store = RecordStore(capacity: 10)
        var record = NotificationRecord(apnsID: random.apnsID(), token: "ab", environment: .sandbox, receivedAtMs: 1)
        record.uniquePushID = random.uniquePushID()
        let apnsID = record.apnsID
        let uniqueID = record.uniqueID!
        _ = store.append(record)
        _ = store.append(NotificationRecord(apnsID: random.apnsID(), token: "cd", environment: .sandbox, receivedAtMs: 2))
        #expect(store.newest(withID: apnsID.lowercased())?.token == "ab")
        #expect(store.newest(withID: apnsID)?.token == "ab")
        #expect(store.newest(withID: uniqueID.uppercased())?.token == "ab")
        #expect(store.newest(withID: "00000000-0000-0000-0000-000000000000") == nil)
    }
}
