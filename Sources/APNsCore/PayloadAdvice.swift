// PayloadAdvice: what a provider got wrong that APNs answers 200 to without a word, said in the
// record, so that "works in development, silent in production" has a reason to read: a wake
// asked for in a form iOS does not read, a background push sent as an alert, without a push
// type or at priority 10. Pure; read only for the pushes it concerns (nothing to show, or a
// `content-available` that is not 1), never for a plain alert.

import JSON

enum PayloadAdvice {
    /// How the payload asks for a wake that iOS does not read (`content-available` is the
    /// number 1 inside `aps`); nil when it does not look like it means one.
    static func wakeMistake(_ payload: [UInt8]) -> String? {
        guard let top = (try? JSONValue.parse(payload))?.objectValue else { return nil }
        let aps = top["aps"]?.objectValue
        if let value = aps?["content-available"], value.numberValue != 1, value.numberValue != 0 {
            return "content-available is \(shown(value)), not the number 1"
        }
        for misspelt in ["content_available", "contentAvailable", "content-availible", "content-avaliable"] where aps?[misspelt] != nil {
            return "aps has \"\(misspelt)\", which iOS does not read (it reads \"content-available\": 1)"
        }
        if top["content-available"] != nil || top["content_available"] != nil || top["contentAvailable"] != nil {
            return "content-available is outside aps, where iOS does not read it"
        }
        return nil
    }

    /// Notes on a background push (content-available, nothing to show) sent another way than
    /// Apple asks: `apns-push-type: background` (required on iOS 13 and later; APNs "may delay
    /// or drop" a push whose type does not match its payload) and priority 5 (10 "is an
    /// error"). The emulator still goes by the payload; the record says what Apple may do.
    static func backgroundPushNotes(pushType: PushType, headerSent: Bool, priority: Int) -> [String] {
        var notes: [String] = []
        if pushType == .alert {
            notes.append(
                headerSent
                    ? "sent as apns-push-type alert with nothing to show: Apple asks for background, and APNs may delay or drop a push whose type does not match its payload"
                    : "sent without apns-push-type: Apple requires background for a background push on iOS 13 and later, and APNs may delay or drop it without one"
            )
        }
        if priority == 10 {
            notes.append(
                "sent at priority 10: Apple calls priority 10 for a background push an error (send it at 5), and iOS may not wake the app for it")
        }
        if !notes.isEmpty { notes.append("the emulator goes by the payload") }
        return notes
    }

    /// A value as the provider wrote it, cut short for a note.
    static func shown(_ value: JSONValue) -> String {
        let text = value.serialized()
        return text.count > 24 ? String(text.prefix(24)) + "…" : text
    }
}
