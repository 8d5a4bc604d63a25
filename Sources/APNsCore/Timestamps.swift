/// RFC 3339 times in UTC with milliseconds, without Foundation's formatters (which are slow
/// and locale-sensitive).
public enum RFC3339 {
    /// The first and last moments RFC 3339 can write (0001-01-01T00:00:00.000Z and
    /// 9999-12-31T23:59:59.999Z); a time outside is written as the nearer one, so that no
    /// number (a user's `since`, a date far in the future) can overflow the arithmetic below.
    public static let earliestMs: Int64 = -62_135_596_800_000
    public static let latestMs: Int64 = 253_402_300_799_999

    public static func format(milliseconds unclamped: Int64) -> String {
        let milliseconds = min(max(unclamped, earliestMs), latestMs)
        let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        let millis = milliseconds - seconds * 1000
        var days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        // Civil-from-days (proleptic Gregorian), after Howard Hinnant's public-domain algorithm.
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return
            "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(millis, 3))Z"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`; returns ms since the epoch.
    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return nil }
        func number(_ start: Int, _ count: Int) -> Int64? {
            guard start + count <= bytes.count else { return nil }
            var value: Int64 = 0
            for c in bytes[start..<(start + count)] {
                guard c >= 0x30 && c <= 0x39 else { return nil }
                value = value * 10 + Int64(c - 0x30)
            }
            return value
        }
        guard let year = number(0, 4), bytes[4] == UInt8(ascii: "-"), let month = number(5, 2), bytes[7] == UInt8(ascii: "-"),
            let day = number(8, 2), bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t") || bytes[10] == 0x20,
            let hour = number(11, 2), bytes[13] == UInt8(ascii: ":"), let minute = number(14, 2),
            bytes[16] == UInt8(ascii: ":"), let second = number(17, 2),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var index = 19
        var millis: Int64 = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var digits = 0
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                if digits < 3 { millis = millis * 10 + Int64(bytes[index] - 0x30) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            if digits < 3 { for _ in digits..<3 { millis *= 10 } }
        }
        guard index < bytes.count else { return nil }
        var offsetSeconds: Int64 = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard let oh = number(index + 1, 2), bytes.count > index + 3, bytes[index + 3] == UInt8(ascii: ":"),
                let om = number(index + 4, 2)
            else { return nil }
            offsetSeconds = (oh * 3600 + om * 60) * (bytes[index] == UInt8(ascii: "+") ? 1 : -1)
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }
        // Days-from-civil, the inverse of `format`.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let dayOfYear = (153 * mp + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return seconds * 1000 + millis
    }
}

/// Seconds since 1970 as JSON bodies give them (`dismissalDate`): whole milliseconds when the
/// number is finite and within the years RFC 3339 writes, nil otherwise (1e300 would trap).
public func millisecondsSince1970(seconds: Double) -> Int64? {
    guard seconds.isFinite, seconds * 1000 >= Double(RFC3339.earliestMs), seconds * 1000 <= Double(RFC3339.latestMs) else { return nil }
    return Int64((seconds * 1000).rounded())
}

/// Whole seconds since 1970 as headers give them (`apns-expiration` takes any 64-bit number):
/// milliseconds, the largest for a time past what 64 bits of milliseconds hold (9.2e18 seconds
/// overflowed, and one push stopped the process).
public func millisecondsSince1970(wholeSeconds seconds: Int64) -> Int64 {
    let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    return overflow ? (seconds < 0 ? .min : .max) : ms
}

/// A time given in milliseconds that looks like seconds since 1970 (ten digits: 2001 to 5138
/// in seconds, but January 1970 to 1973 in milliseconds): a unit mix-up to refuse, not a time.
public func looksLikeSeconds(milliseconds value: Int64) -> Bool {
    (1_000_000_000..<100_000_000_000).contains(value)
}

/// The refusal of such a time, naming the value meant.
public func secondsGivenForMilliseconds(_ field: String, _ value: Int64) -> String {
    "\(field) \(value) looks like seconds since 1970 (\(RFC3339.format(milliseconds: value * 1000))); give milliseconds (\(value * 1000)) or an RFC 3339 time"
}
